"""`coop bench`: sweep budget ratios x policies over the paper's models and traces (placeholder)."""


def add_arguments(parser):
    parser.set_defaults(run=main)


def main(args):
    raise SystemExit("coop bench is not built yet")
