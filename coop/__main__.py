"""The `coop` command: `coop replay` (one trace, one budget) and `coop bench` (the sweep)."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="coop", description=__doc__.split(":")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    from coop import bench, replay_cli
    replay_cli.add_arguments(sub.add_parser(
        "replay", help="replay a trace under a budget and policy; print the run's metrics",
        description=replay_cli.__doc__))
    bench.add_arguments(sub.add_parser(
        "bench", help="sweep budgets x policies over the paper's models and traces",
        description=bench.__doc__))
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
