"""The `coop` command: `coop replay` (one trace, one budget) and `coop bench` (the sweep).

Every error is one line on stderr: exit status 2 for a bad argument, 1 for a run that failed
(a trace that cannot be read, a file that cannot be written), 3 from `coop replay` when a
policy ran out of memory or thrashed; --debug shows the traceback. Output into a pipe that
closes early (`coop replay ... --json | head`) ends quietly with status 141, as `yes | head`.
"""
import argparse
import os
import sys
import traceback

from coop.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as UsageError (one line, exit status 2)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an argument the command does not take points to the command's help
        (argparse reports it from the main parser: `see coop --help`)."""
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(args, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extras)} (see {prog} "
                             "--help)")
        return args


def parser():
    main_parser = _Parser(prog="coop", description=__doc__.split(":")[0])
    main_parser.add_argument("--debug", action="store_true",
                             help="show a Python traceback for an error")
    sub = main_parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    from coop.cli import bench, replay
    commands = {
        "replay": (replay, "replay a trace under a budget and policy; print the run's "
                           "metrics"),
        "bench": (bench, "sweep budgets x policies over the paper's models and traces"),
    }
    for name, (module, text) in commands.items():
        command = sub.add_parser(name, help=text, description=module.__doc__)
        # SUPPRESS: `coop --debug replay` is not undone by the subcommand's default
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show a Python traceback for an error")
        module.add_arguments(command)
    return main_parser


def main(argv=None):
    """Run the command; returns its exit status (0, 1, 2, 3 or 141) after printing any error."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    command = next((a for a in argv if not a.startswith("-")), None)
    prog = f"coop {command}" if command in ("replay", "bench") else "coop"
    try:
        args = parser().parse_args(argv)
        status = args.run(args)
        sys.stdout.flush()     # a closed pipe raises here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE
    except UsageError as e:
        if debug:      # the traceback, and still a usage error's status
            traceback.print_exc()
        else:
            _say(str(e))
        return 2
    except (Exception, RecursionError, MemoryError) as e:   # noqa: BLE001 - the command's face
        if debug:
            raise
        _say(f"{prog}: error: {_describe(e)} (--debug shows the traceback)")
        return 1


#: exit status when stdout is a pipe that closed (128 + SIGPIPE, as a shell reports it)
BROKEN_PIPE = 141


def _silence_stdout():
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):    # stdout is not a file descriptor (a test's capture)
        pass


def _describe(error):
    from coop.errors import CoopError
    text = str(error) or type(error).__name__
    if not isinstance(error, (CoopError, OSError)):
        text = f"{type(error).__name__}: {text}"
    return text


def _say(line):
    """One line on stderr, however long or many-lined the message."""
    print(" ".join(line.split())[:2000], file=sys.stderr)

