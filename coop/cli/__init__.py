"""The `coop` command line: `coop replay` (one trace, one budget) and `coop bench` (the sweep
over the paper's models), with the bench's report and claims.

The top layer: it may import every layer below (coop.trace, coop.models, coop.engine, ...);
nothing in coop imports it.
"""
