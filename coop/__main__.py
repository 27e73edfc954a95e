"""`python -m coop`: the same as the `coop` command."""
import sys

from coop.cli.main import main

sys.exit(main())
