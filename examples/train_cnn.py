"""A small ResNet trained under a hard memory budget on scikit-learn's digits dataset.

Data: `sklearn.datasets.load_digits` (1,797 grey 8x8 images of handwritten digits, 10 classes;
shipped inside scikit-learn, BSD licence, nothing downloaded). Pixels (0..16) are scaled to
[0, 1] and standardized with the training split's mean and deviation; a fixed permutation
(`--seed`) holds out `--test-fraction` of the images for the test accuracy.

Workload: `coop.models.ResNet` with the small stem (a 3x3/1 convolution, no pool) and basic
blocks: `--layers` blocks per stage (comma-separated; default 8: one stage of width
`--width`), global average pool and a linear classifier, trained by SGD with momentum on random
mini-batches of `--batch` images for `--steps` steps. The runtime evicts and recomputes
activations to stay within `--budget`: bytes, a size ("16MB") or a ratio of the unlimited run's
peak ("0.5x": a short unlimited probe of `--probe-steps` steps measures `arena_peak_used_bytes`
first). Costs default to the deterministic CPU cost model (`--cost cpu`).

Output: a tqdm bar with the loss, the loss every `--log-every` steps, the test accuracy at the
end, the runtime's peak arena use, evictions, recomputes and compute overhead, and a PNG
(`--out`/train_cnn.png) of the loss curve and the arena's used bytes over steps.

Measured (2 CPU cores, numpy, the defaults: one stage of 8 basic blocks, width 8, batch 32,
lr 0.05, 200 steps, budget 0.7x = 1.68 MiB of a 2.40 MiB unlimited peak, policy coop): loss 3.28
at step 0, final train loss 0.3068 (mean of the last 10 steps), test accuracy 0.9278 (360
images); peak arena use 1.66 MiB, 2,401 evictions, 3,802 recomputes, compute overhead 1.101;
about 30 seconds. Each 3x3 convolution's im2col buffer, 9x its input, and tensordot's copy of
it make one op's working set large next to the whole net's activations on 8x8 images, and
that bounds the least budget: `--budget 0.25x --steps 5` completes, `--budget 0.2x --steps 5`
runs out of memory.

Needs scikit-learn: pip install ".[examples]".
Run (after `pip install .`): python examples/train_cnn.py [--budget 0.7x] [--policy coop]
"""
import argparse
import os
import sys
import time

# Small matrices: one BLAS thread is as fast, and a multithreaded OpenBLAS stalls badly when
# the cores are shared with other processes (measured: 0.2 s/step alone, minutes when shared).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


import numpy as np  # noqa: E402

from coop import models, optim  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # examples/_common.py
from _common import (MB, Parser, add_run_options, fraction, make_runtime,  # noqa: E402
                     non_negative_float, plot_run, positive_float, positive_int, print_summary,
                     resolve_budget, run_main, run_training, start, unlimited_peak)

SCRIPT = "examples/train_cnn.py"


def load_digits(test_fraction, seed):
    """(x_train, y_train, x_test, y_test): float32 (N, 1, 8, 8) images and int64 labels."""
    from sklearn.datasets import load_digits as load
    digits = load()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    cut = int(len(y) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    if not len(train) or not len(test):      # main() refuses the --test-fraction
        return x[train], y[train], x[test], y[test]
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    return x[train], y[train], x[test], y[test]






def train(args, data, budget, steps, progress=True, log=print):
    """Trains a fresh ResNet for `steps` steps within `budget` bytes; returns a dict of the
    runtime, model, losses, arena used bytes after each forward and the running peak."""
    x_train, y_train = data[:2]
    rt = make_runtime(budget, args.policy, args.backend, args.cost)
    layers = [int(n) for n in args.layers.split(",")]
    model = models.ResNet(rt, layers, "basic", width=args.width, num_classes=10, in_channels=1,
                          stem="small", rng=args.seed)
    opt = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)

    def next_batch(rng):
        pick = rng.integers(0, len(y_train), args.batch)
        return rt.tensor(x_train[pick]), y_train[pick]

    return run_training(rt, model, opt, next_batch, args, steps, progress, log)


def accuracy(model, rt, x, y, batch):
    """Test accuracy with BatchNorm's running statistics (eval mode)."""
    model.eval()
    correct = 0
    for i in range(0, len(y), batch):
        logits = model(rt.tensor(x[i:i + batch])).numpy()
        correct += int((logits.argmax(axis=1) == y[i:i + batch]).sum())
    model.train()
    return correct / len(y)



def layer_counts(text):
    """--layers: comma-separated whole numbers, each at least 1 (kept as written)."""
    try:
        ok = all(int(n) >= 1 for n in text.split(","))
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"must be comma-separated whole numbers, each at least "
                                         f"1 (\"8\", \"2,2\"), got {text!r}")
    return text


def parser():
    p = Parser(SCRIPT, description=__doc__.split("\n")[0])
    add_run_options(p, budget="0.7x", steps=200, budget_example="16MB", out="train_cnn_out")
    p.add_argument("--layers", type=layer_counts, default="8",
                   help="basic blocks per stage (comma-separated)")
    p.add_argument("--width", type=positive_int, default=8)
    p.add_argument("--batch", type=positive_int, default=32)
    p.add_argument("--lr", type=positive_float, default=0.05)
    p.add_argument("--weight-decay", type=non_negative_float, default=1e-4)
    p.add_argument("--test-fraction", type=fraction, default=0.2,
                   help="the share of the images held out for the test accuracy")
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    start(SCRIPT, args, argv)
    data = load_digits(args.test_fraction, args.seed)
    if not len(data[1]) or not len(data[3]):
        p.error(f"--test-fraction {args.test_fraction} leaves {len(data[1])} training and "
                f"{len(data[3])} test images; give one that leaves some of each")
    print(f"data: scikit-learn digits, {len(data[1])} train / {len(data[3])} test images (8x8)")

    begin = time.perf_counter()
    budget, peak = resolve_budget(SCRIPT, args, lambda: unlimited_peak(SCRIPT, args, lambda: (
        train(args, data, args.probe_budget, args.probe_steps, progress=False, log=None)["rt"])))
    print(f"model: ResNet stem=small layers={args.layers} width={args.width} batch={args.batch}; "
          f"policy {args.policy}, backend {args.backend}, cost {args.cost}")

    t0 = time.perf_counter()
    run = train(args, data, budget, args.steps, progress=not args.no_progress)
    train_time = time.perf_counter() - t0
    stats = run["rt"].stats()
    acc = accuracy(run["model"], run["rt"], data[2], data[3], args.batch)
    run.update(accuracy=acc, budget=budget, peak_unlimited=peak, stats=stats,
               train_time=train_time)

    print_summary([("parameters", f"{run['model'].num_parameters():,}"),
                   ("initial train loss", f"{run['losses'][0]:.4f}"),
                   (f"final train loss (mean of last {len(run['losses'][-10:])})",
                    f"{np.mean(run['losses'][-10:]):.4f}"),
                   ("test accuracy", f"{acc:.4f}")],
                  budget, peak, stats, train_time, time.perf_counter() - begin)

    lines = [(np.log(10), "chance (ln 10)", "--")]
    plot_run(run, budget, args.out, "train_cnn.png", f"ResNet on digits, {args.policy} at "
             f"{budget / MB:.2f} MiB, test accuracy {acc:.3f}", lines)
    return run


if __name__ == "__main__":
    sys.exit(run_main(SCRIPT, main))
