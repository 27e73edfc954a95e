"""One training step of each model of the Coop paper's evaluation set at its paper batch size,
on the simulation backend (nothing allocated) with the a100-80gb roofline cost model and no
budget: the modeled step time, the peak arena use, and the wall time of the simulation.

Run: python benchmarks/paper_models.py [--batch N] [--optimizer sgd|adamw] [names...]
"""
import argparse
import time

import coop
from coop.models import paper

GiB = 1 << 30


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(paper.PAPER_MODELS))
    parser.add_argument("--batch", type=int, default=None, help="override the paper's batch")
    parser.add_argument("--optimizer", default="sgd", choices=sorted(paper.OPTIMIZERS))
    args = parser.parse_args()
    print(f"{'model':<13} {'batch':>5} {'params':>12} {'step (ms)':>10} {'peak (GiB)':>10} "
          f"{'ops':>7} {'wall (s)':>8}")
    for name in args.names:
        rt = coop.Runtime(coop.SimBackend("1000GiB"), policy="coop", cost="a100-80gb")
        start = time.perf_counter()
        stats = paper.training_step(rt, name, args.batch, args.optimizer)
        wall = time.perf_counter() - start
        batch = paper.PAPER_MODELS[name].batch if args.batch is None else args.batch
        print(f"{name:<13} {batch:>5} {paper.num_parameters(name):>12,} "
              f"{stats['cost_total'] / 1e6:>10.1f} {stats['peak_used_bytes'] / GiB:>10.2f} "
              f"{stats['ops']:>7} {wall:>8.2f}")


if __name__ == "__main__":
    main()
