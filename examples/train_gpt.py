"""A character-level GPT trained under a hard memory budget, on text built on this machine.

Corpus (licence-clean, nothing downloaded, nothing cached): the docstrings of a fixed, sorted
list of pure-Python standard-library modules (CORPUS_MODULES below; Python Software Foundation
licence). Each module's source file is read from the standard library's directory (not
imported: every interpreter reads the same files, whatever it holds frozen) and parsed with
`ast`; the module, class and function docstrings are collected in the order `ast.walk` visits
them, cleaned with `inspect.cleandoc` and joined with blank lines. Characters outside
printable ASCII become "?". The text differs a little between Python versions: the run prints
the version, the modules, the corpus size and a checksum. The last `--val-fraction` of the text is held out for evaluation.

Workload: `coop.models.GPT` (pre-LN, tied LM head) of `--layers` blocks, `--heads` heads, width
`--d-model`, context `--block` characters, dropout `--dropout`, trained by AdamW on random
windows of `--batch` sequences for `--steps` steps, the learning rate warming up linearly over
`--warmup` steps to `--lr` and then decaying along a cosine to `--final-lr-ratio` of it, the
gradients clipped to a global norm of `--clip` (coop.optim: both run as coop ops, under the
budget): so every seed converges rather than some stalling on a plateau. The runtime evicts
and recomputes activations to stay within `--budget`: bytes, a size ("256MB") or a share of
the unlimited run's peak ("0.5x" or "50%": a short unlimited probe of `--probe-steps` steps
measures it first). Costs default to the deterministic CPU cost model (`--cost cpu`), so the
eviction decisions, and the whole run, are reproducible on one machine: the budgeted run's
losses are bit-identical to an unlimited run's. Across BLAS kernels (OpenBLAS picks one per CPU;
`OPENBLAS_CORETYPE` overrides it) the rounding differs and the losses move within the spread
the README states (benchmarks/main_job_spread.py measures it); evictions and recomputes do not.

Output: a tqdm bar with the loss, the loss every `--log-every` steps, the held-out loss at the end
(against the unigram entropy of the training text, the loss of a model that ignores context),
the runtime's peak arena use, evictions, recomputes and compute overhead, and a PNG
(`--out`/train_gpt.png) of the loss curve and the arena's used bytes over steps.

Run (after `pip install .`): python examples/train_gpt.py [--budget 0.5x] [--policy coop]

Data parallel (after `pip install ".[mpi]"`): mpiexec -n 2 python examples/train_gpt.py
--distributed [--check-identical]. Each rank runs its own runtime under its own
budget (on a GPU: its own device, NCCL) and trains on its slice of --batch windows of a global
batch of 2 x --batch; gradients are averaged in buckets in the arena (coop.distributed). The
losses printed are the ranks' mean; rank 0 prints, with a table of every rank's figures.
"""
import ast
import hashlib
import inspect
import math
import os
import sys
import sysconfig
import time

# Small matrices: one BLAS thread is as fast, and a multithreaded OpenBLAS stalls badly when
# the cores are shared with other processes (measured: 0.2 s/step alone, minutes when shared).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


import numpy as np  # noqa: E402

from coop import models, optim  # noqa: E402
from coop.budget import parse_budget  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # examples/_common.py
from _common import (MB, Parser, add_distributed_options, add_run_options,  # noqa: E402
                     fraction, make_runtime, non_negative_float, non_negative_int, plot_run,
                     positive_float, positive_int, print_summary, rate, resolve_budget, run_main,
                     run_training, start, start_distributed, unlimited_peak)

SCRIPT = "examples/train_gpt.py"

# Pure-Python standard-library modules present in every CPython >= 3.11 build, sorted; each is
# read from its source file in the standard library's directory, so every interpreter reads the
# same files (Python 3.11 freezes abc, codecs, io and os, and imports them without one: they
# are not here).
CORPUS_MODULES = sorted([
    "argparse", "ast", "base64", "bisect", "calendar", "cmd", "code",
    "collections", "colorsys", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "dis", "doctest", "email.message", "enum", "filecmp",
    "fileinput", "fnmatch", "fractions", "ftplib", "functools", "getopt", "gettext", "glob",
    "gzip", "hashlib", "heapq", "hmac", "html", "imaplib", "inspect", "ipaddress", "json",
    "keyword", "linecache", "locale", "logging", "mailbox", "mimetypes", "numbers", "operator",
    "optparse", "pathlib", "pdb", "pickle", "pkgutil", "platform", "plistlib", "poplib",
    "pprint", "queue", "quopri", "random", "re", "reprlib", "sched", "selectors", "shelve",
    "shlex", "shutil", "smtplib", "socket", "socketserver", "statistics", "string", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "trace", "traceback",
    "turtle", "typing", "unittest.case", "urllib.parse", "urllib.request", "uuid", "warnings",
    "wave", "weakref", "zipfile",
])


# ---- corpus --------------------------------------------------------------------------------


def _source_file(name, stdlib=None):
    """The module's source file in the standard library's directory (a package: its
    __init__.py), or None. By path, not by import: the import system may hold a module frozen."""
    base = os.path.join(stdlib or sysconfig.get_path("stdlib"), *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def build_corpus(modules=CORPUS_MODULES):
    """(text, modules used): the docstrings of `modules`, read from their source files."""
    parts, used = [], []
    for name in modules:
        path = _source_file(name)
        if path is None:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        used.append(name)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and doc.strip():
                    parts.append(inspect.cleandoc(doc))
    text = "\n\n".join(parts)
    text = "".join(c if c == "\n" or 32 <= ord(c) < 127 else "?" for c in text)
    return text, used


class CharData:
    """The corpus as token ids: a sorted character vocabulary, train and held-out splits."""

    def __init__(self, text, val_fraction=0.1):
        self.chars = sorted(set(text))
        self.lookup = {c: i for i, c in enumerate(self.chars)}
        ids = np.array([self.lookup[c] for c in text], dtype=np.int64)
        cut = int(len(ids) * (1 - val_fraction))
        self.train, self.val = ids[:cut], ids[cut:]
        self.checksum = hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def vocab(self):
        return len(self.chars)

    def unigram_entropy(self):
        """Entropy (nats) of the training characters' frequencies."""
        p = np.bincount(self.train, minlength=self.vocab) / len(self.train)
        p = p[p > 0]
        return float(-(p * np.log(p)).sum())

    def batch(self, rng, batch, block, split="train"):
        ids = self.train if split == "train" else self.val
        starts = rng.integers(0, len(ids) - block - 1, batch)
        x = np.stack([ids[s:s + block] for s in starts])
        y = np.stack([ids[s + 1:s + block + 1] for s in starts])
        return x, y

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


# ---- runtime and budget --------------------------------------------------------------------






# ---- training ------------------------------------------------------------------------------


def build(args, data, budget):
    rt = make_runtime(budget, args.policy, args.backend, args.cost)
    model = models.GPT(rt, data.vocab, args.block, args.layers, args.heads, args.d_model,
                       dropout=args.dropout, rng=args.seed)
    opt = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    return rt, model, opt


def train(args, data, budget, steps, progress=True, log=print, comm=None):
    """Trains a fresh model for `steps` steps within `budget` bytes; returns a dict of the
    runtime, model, losses, arena used bytes after each forward and the running peak.

    With comm (coop.distributed), data parallel: every rank draws the same global batch of
    size x --batch windows and trains on its own slice of --batch of them, so the run sees
    the batches of one process with a batch size x larger."""
    rt, model, opt = build(args, data, budget)
    schedule = dict(clip=args.clip, lr_at=lambda step: optim.warmup_cosine(
        step, args.lr, min(args.warmup, steps - 1), steps, args.final_lr_ratio))
    if comm is None:
        return run_training(rt, model, opt, lambda rng: data.batch(rng, args.batch, args.block),
                            args, steps, progress, log, **schedule)
    from coop.distributed import DataParallel
    dp = DataParallel(model, comm, parse_budget(args.bucket_bytes))
    mine = slice(comm.rank * args.batch, (comm.rank + 1) * args.batch)

    def shard(rng):
        x, y = data.batch(rng, args.batch * comm.size, args.block)
        return x[mine], y[mine]

    run = run_training(rt, model, opt, shard, args, steps, progress, log, dp=dp, **schedule)
    run["dp"] = dp
    return run


def evaluate(model, data, args, batches):
    """Mean held-out loss over `batches` fixed random windows (dropout off)."""
    model.eval()
    rng = np.random.default_rng(args.seed + 1)
    total = 0.0
    for _ in range(batches):
        x, y = data.batch(rng, args.batch, args.block, split="val")
        total += float(model.loss(x, y).numpy())
    model.train()
    return total / batches


def probe_peak(args, data):
    """peak_used_bytes of a short run under --probe-budget that must not evict (else a usage
    error naming --probe-budget)."""
    return unlimited_peak(SCRIPT, args, lambda: train(
        args, data, args.probe_budget, args.probe_steps, progress=False, log=None)["rt"])



def print_ranks(comm, run, budget, batch):
    """Each rank's budget, peak, evictions, overhead and communication, printed by rank 0;
    returns the list (every rank gets it)."""
    stats, dp = run["rt"].stats(), run["dp"]
    mine = dict(rank=comm.rank, budget=budget, peak_used_bytes=stats["peak_used_bytes"],
                evictions=stats["evictions"], recomputes=stats["recomputes"],
                compute_overhead=stats["compute_overhead"], buckets=dp.buckets,
                reduced_bytes=dp.bytes, comm_seconds=dp.seconds, identical_checks=dp.checks)
    ranks = comm.allgather(mine)
    print(f"per rank (global batch {batch * comm.size} = {comm.size} x {batch}):")
    print("  rank  budget MiB  peak MiB  evictions  recomputes  overhead  buckets  "
          "reduced MiB  comm s  identical checks")
    for r in ranks:
        print(f"  {r['rank']:4d}  {r['budget'] / MB:10.3f}  {r['peak_used_bytes'] / MB:8.3f}  "
              f"{r['evictions']:9,d}  {r['recomputes']:10,d}  {r['compute_overhead']:8.3f}  "
              f"{r['buckets']:7,d}  {r['reduced_bytes'] / MB:11.2f}  {r['comm_seconds']:6.2f}  "
              f"{r['identical_checks']:16,d}")
    return ranks


def parser():
    p = Parser(SCRIPT, description=__doc__.split("\n")[0])
    add_run_options(p, budget="0.5x", steps=600, budget_example="256MB", out="train_gpt_out")
    p.add_argument("--layers", type=positive_int, default=4)
    p.add_argument("--heads", type=positive_int, default=4,
                   help="attention heads (a divisor of --d-model)")
    p.add_argument("--d-model", type=positive_int, default=64)
    p.add_argument("--block", type=positive_int, default=64, help="context length (characters)")
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--dropout", type=rate, default=0.0)
    p.add_argument("--lr", type=positive_float, default=6e-3, help="peak learning rate")
    p.add_argument("--warmup", type=non_negative_int, default=50,
                   help="steps of linear learning-rate warmup, then a cosine decay")
    p.add_argument("--final-lr-ratio", type=non_negative_float, default=0.1,
                   help="the learning rate at the last step, as a share of --lr")
    p.add_argument("--clip", type=non_negative_float, default=1.0,
                   help="largest global gradient norm (0: no clipping)")
    p.add_argument("--weight-decay", type=non_negative_float, default=0.01)
    p.add_argument("--val-fraction", type=fraction, default=0.1,
                   help="the share of the corpus held out, at its end")
    p.add_argument("--eval-batches", type=positive_int, default=20,
                   help="held-out batches the final loss is measured on")
    add_distributed_options(p)
    return p


def check_args(p, args):
    """What one option's type cannot check: options against each other."""
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}; give a "
                "--d-model that --heads divides")
    try:
        parse_budget(args.bucket_bytes)
    except (TypeError, ValueError) as e:
        p.error(f"--bucket-bytes: {e}")


def check_data(p, args, data):
    """Each split must hold a window of --block + 1 characters."""
    for name, ids, fix in (("training", data.train, "lower --val-fraction"),
                           ("held-out", data.val, "raise --val-fraction")):
        if len(ids) < args.block + 2:
            p.error(f"--val-fraction {args.val_fraction} leaves {len(ids):,} {name} characters, "
                    f"fewer than --block {args.block} + 2; {fix} or lower --block")


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    check_args(p, args)
    comm = start_distributed(args)
    start(SCRIPT, args, argv)
    text, used_modules = build_corpus()
    data = CharData(text, args.val_fraction)
    check_data(p, args, data)
    print(f"corpus: docstrings of {len(used_modules)} standard-library modules of Python "
          f"{sys.version.split()[0]} ({len(text):,} characters, sha256 {data.checksum}):")
    print("  " + ", ".join(used_modules))
    unigram = data.unigram_entropy()
    print(f"vocab {data.vocab} (ln vocab = {math.log(data.vocab):.3f}), unigram entropy "
          f"{unigram:.3f} nats; train {len(data.train):,} / held-out {len(data.val):,} chars")

    begin = time.perf_counter()
    budget, peak = resolve_budget(SCRIPT, args, lambda: probe_peak(args, data))
    print(f"model: GPT layers={args.layers} heads={args.heads} d_model={args.d_model} "
          f"block={args.block} batch={args.batch}; policy {args.policy}, backend {args.backend}, "
          f"cost {args.cost}")

    t0 = time.perf_counter()
    run = train(args, data, budget, args.steps, progress=not args.no_progress, comm=comm)
    train_time = time.perf_counter() - t0
    val_loss = evaluate(run["model"], data, args, args.eval_batches)
    stats = run["rt"].stats()
    run.update(unigram=unigram, val_loss=val_loss, budget=budget, peak_unlimited=peak,
               stats=stats, train_time=train_time, corpus_modules=used_modules)

    model = run["model"]
    print(f"parameters: {model.num_parameters():,}")
    print_summary([("initial train loss", f"{run['losses'][0]:.4f}"),
                   (f"final train loss (mean of last {len(run['losses'][-10:])})",
                    f"{np.mean(run['losses'][-10:]):.4f}"),
                   ("held-out loss", f"{val_loss:.4f}"),
                   ("unigram entropy", f"{unigram:.4f}"),
                   ("ln(vocab)", f"{math.log(data.vocab):.4f}")],
                  budget, peak, stats, train_time, time.perf_counter() - begin)
    if comm is not None:
        run["ranks"] = print_ranks(comm, run, budget, args.batch)

    if comm is not None and comm.rank != 0:
        return run
    lines = [(v, label, style) for v, label, style in (
        (run.get("unigram"), "unigram entropy", "--"),
        (run.get("val_loss"), "held-out loss (end)", ":")) if v is not None]
    plot_run(run, budget, args.out, "train_gpt.png", f"char GPT on stdlib docstrings, "
             f"{args.policy} at {budget / MB:.2f} MiB", lines)
    return run


if __name__ == "__main__":
    sys.exit(run_main(SCRIPT, main))
