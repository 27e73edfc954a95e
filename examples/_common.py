"""What the examples share: the command line (one-line usage errors, checked values), backend
choice, runtime, budget ratios, the run's plot."""
import argparse
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tqdm import tqdm  # noqa: E402

import coop  # noqa: E402
from coop import optim  # noqa: E402
from coop.engine.policies import POLICIES  # noqa: E402
from coop.budget import Budget, host_memory_bytes  # noqa: E402

MB = 1 << 20


def default_backend():
    try:
        import cupy
        return "cupy" if cupy.cuda.is_available() else "numpy"
    except Exception:     # not installed, or no driver
        return "numpy"


def make_runtime(budget, policy, backend, cost):
    """A coop.Runtime over a numpy arena or a CuPy pool of `budget` bytes."""
    if backend == "cupy":
        return coop.Runtime(coop.allocator(budget), policy=policy, cost=cost)
    return coop.Runtime(coop.numpy_allocator(budget), policy=policy, cost=cost)


#: --update-in-backward with an option that needs every gradient before any update
IN_BACKWARD_CONFLICT = ("--update-in-backward updates each parameter as soon as its own gradient "
                        "is complete, so it cannot clip the global gradient norm first (pass "
                        "--clip 0) nor average the gradients over ranks first (drop "
                        "--distributed)")


def usage_error(script, message):
    """A bad argument: one line on stderr naming it and the fix, then exit status 2."""
    print(f"{script}: error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(2)


class Parser(argparse.ArgumentParser):
    """argparse for an example: a bad argument is one line on stderr naming it and the fix,
    exit status 2 (no usage block); --help shows every option's default."""

    def __init__(self, script, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(prog=script, **kwargs)

    def add_argument(self, *args, **kwargs):
        # argparse shows a default only beside help text: an option without any gets its own
        if "help" not in kwargs and kwargs.get("action") not in ("store_true", "store_false"):
            kwargs["help"] = "(default: %(default)s)"
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        # "argument --steps: must be at least 1, got 0" -> "--steps must be at least 1, got 0"
        checked = re.fullmatch(r"argument (\S+): (must be .*)", message, flags=re.S)
        if checked:
            message = f"{checked.group(1)} {checked.group(2)}"
        elif message.startswith(("argument ", "unrecognized arguments")):  # argparse's own
            message = f"{message} (see {self.prog} --help)"
        usage_error(self.prog, message)


def checked(noun, convert, ok, requirement):
    """An argparse type: convert(text), which must satisfy ok; else "must be <requirement>"."""
    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {noun} {requirement}, got {text!r}") \
                from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
        return value
    parse.__name__ = noun
    return parse


def _finite(convert):
    def parse(text):
        value = convert(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value
    return parse


positive_int = checked("a whole number", int, lambda v: v >= 1, "at least 1")
non_negative_int = checked("a whole number", int, lambda v: v >= 0, "at least 0")
positive_float = checked("a number", _finite(float), lambda v: v > 0, "more than 0")
non_negative_float = checked("a number", _finite(float), lambda v: v >= 0, "at least 0")
fraction = checked("a number", _finite(float), lambda v: 0 < v < 1,
                   "between 0 and 1, both excluded")
rate = checked("a number", _finite(float), lambda v: 0 <= v < 1, "at least 0 and below 1")


def check_out(script, out, option="--out"):
    """Refuse an output directory that cannot be made or written, before any work."""
    path = os.path.abspath(out)
    if os.path.exists(path) and not os.path.isdir(path):
        usage_error(script, f"{option} {out}: is a file, not a directory; give a directory")
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        usage_error(script, f"{option} {out}: {parent} is a file, so the directory cannot be "
                            "made; give another directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        usage_error(script, f"{option} {out}: {parent} is not writable; give a directory you "
                            "can write")


def check_alignment(script, option, text, nbytes, backend):
    """Refuse a budget the backend's arena cannot be made of (below one aligned piece): the
    allocator's own check, made now (no memory is touched), as a usage error."""
    try:
        coop.allocator(nbytes) if backend == "cupy" else coop.numpy_allocator(nbytes)
    except ValueError as e:
        usage_error(script, f"{option} {text}: {e}")


def check_backend(script, backend):
    """--backend cupy needs CuPy and a CUDA device: say which is missing."""
    if backend != "cupy":
        return
    try:
        import cupy
    except ImportError:
        usage_error(script, "--backend cupy: CuPy is not installed (pip install "
                            "cupy-cuda12x); or use --backend numpy")
    if not cupy.cuda.is_available():
        usage_error(script, "--backend cupy: there is no CUDA device here "
                            "(cupy.cuda.is_available() is false); use --backend numpy")


def start(script, args, argv):
    """Check the arguments (a bad one: usage_error), fill in the backend and print the command
    line (the run's first output line)."""
    check_backend(script, args.backend)
    args.backend = args.backend or default_backend()
    for option, budget in (("--budget", read_budget), ("--probe-budget", Budget)):
        text = getattr(args, option[2:].replace("-", "_"))
        try:
            value = budget(text)
            if not value.is_share:
                nbytes = value.resolve(limit=host_memory_bytes(),
                                       limit_name="this host's memory")
        except (TypeError, ValueError) as e:
            usage_error(script, f"{option}: {e}")
        if not value.is_share:
            check_alignment(script, option, text, nbytes, args.backend)
    check_out(script, args.out)
    if args.update_in_backward and (getattr(args, "clip", 0) or getattr(args, "distributed",
                                                                          False)):
        usage_error(script, IN_BACKWARD_CONFLICT)
    print("command:", " ".join([script, *(sys.argv[1:] if argv is None else argv)]))


def run_main(script, main):
    """The example's main() as a command: coop's own errors (out of memory, thrash) are one line
    on stderr and exit status 1."""
    try:
        main()
    except coop.CoopError as e:
        print(f"{script}: error: {type(e).__name__}: {' '.join(str(e).split())}",
              file=sys.stderr)
        return 1
    return 0


def read_budget(text):
    """The example's --budget: bytes, a size, or a share ("0.5x", "50%") of the unlimited peak."""
    return Budget(text, of="the unlimited peak (measured by a short probe)")


def unlimited_peak(script, args, train_probe):
    """peak_used_bytes of the unlimited probe: train_probe() trains --probe-steps steps under
    --probe-budget and returns its runtime. It must run as if unlimited: a probe that evicted or
    offloaded measured a capped peak, and one that ran out of memory none, so either is a usage
    error naming --probe-budget."""
    problem = (f"--probe-budget {args.probe_budget} cannot hold the unlimited probe "
               f"({args.probe_steps} steps of policy {args.policy})")
    try:
        stats = train_probe().stats()
    except coop.CoopError as e:
        usage_error(script, f"{problem}: it failed ({type(e).__name__}); raise --probe-budget")
    if stats["evictions"] or stats.get("offloads"):
        usage_error(script, f"{problem}: it had to evict ({stats['evictions']:,} evictions, "
                            f"{stats.get('offloads', 0):,} offloads), so its peak is not the "
                            "unlimited one; raise --probe-budget")
    return stats["peak_used_bytes"]


def resolve_budget(script, args, probe):
    """(bytes, unlimited peak or None), printed: a share ("0.5x", "50%") runs probe() -> the
    unlimited peak first; a size is bytes. Checked before the probe by start()."""
    budget = read_budget(args.budget)
    if budget.is_share:
        peak = probe()
        try:
            nbytes = budget.resolve(peak, limit=host_memory_bytes(),
                                    limit_name="this host's memory")
        except ValueError as e:
            usage_error(script, f"--budget: {e}")
        check_alignment(script, "--budget", f"{args.budget} of {peak:,} bytes", nbytes,
                        args.backend)
        print(f"unlimited probe ({args.probe_steps} steps): peak arena use {peak / MB:.2f} MiB "
              f"-> budget {args.budget} = {nbytes:,} bytes ({nbytes / MB:.2f} MiB)")
        return nbytes, peak
    nbytes = budget.resolve(limit=host_memory_bytes(), limit_name="this host's memory")
    print(f"budget {nbytes:,} bytes ({nbytes / MB:.2f} MiB)")
    return nbytes, None


def add_run_options(p, budget, steps, budget_example, out):
    """The options every training example takes."""
    p.add_argument("--budget", default=budget,
                   help=f'bytes, a size ("{budget_example}") or a share of the unlimited peak '
                        '("0.5x", "50%%")')
    p.add_argument("--policy", default="coop",
                   choices=[name for name, p in POLICIES.items() if not p.ideal])
    p.add_argument("--backend", default=None, choices=["numpy", "cupy"],
                   help="default: cupy when cupy.cuda.is_available(), else numpy")
    p.add_argument("--cost", default="cpu", choices=[*coop.DEVICES, "timing"],
                   help='cost model: "cpu" (deterministic), another device name, or "timing"')
    p.add_argument("--steps", type=positive_int, default=steps)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--log-every", type=non_negative_int, default=50,
                   help="print the loss every this many steps (0: never)")
    p.add_argument("--probe-steps", type=positive_int, default=2)
    p.add_argument("--probe-budget", default="4GiB",
                   help="budget of the unlimited probe: it must hold the run without evicting")
    p.add_argument("--out", default=out, help="directory for the PNG")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--update-in-backward", action="store_true",
                   help="update each parameter inside the backward pass as soon as its gradient "
                        "is complete (coop.optim's backward_step): the same training, bit for "
                        "bit, without holding every gradient at once; needs --clip 0 where the "
                        "example clips, and no --distributed")


def add_distributed_options(p):
    """The options of data-parallel runs (``mpiexec -n 2 python examples/...``)."""
    p.add_argument("--distributed", action="store_true",
                   help="data parallel over the ranks mpiexec started (on by itself when "
                        "mpiexec started more than one): each rank trains on its shard of each "
                        "batch under its own budget; gradients are averaged in arena buckets")
    p.add_argument("--bucket-bytes", default="1MiB",
                   help="largest gradient bucket (bytes or a size); the budget covers it")
    p.add_argument("--check-identical", action="store_true",
                   help="after every step, compare the parameters' hashes across ranks "
                        "(raises if they differ)")


def launched_ranks():
    """How many processes mpiexec started (1 outside mpiexec), from its environment."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def start_distributed(args):
    """The communicator of a distributed run (None otherwise). Ranks other than 0 print
    nothing: one log for the run, per-rank figures are gathered to rank 0."""
    if not args.distributed and launched_ranks() > 1:
        args.distributed = True
    if not args.distributed:
        return None
    args.backend = args.backend or default_backend()
    from coop import distributed
    comm = distributed.init("nccl" if args.backend == "cupy" else "mpi")
    if comm.rank != 0:
        sys.stdout = open(os.devnull, "w")
        args.no_progress = True
    print(f"distributed: {comm.size} ranks ({'NCCL' if args.backend == 'cupy' else 'MPI'}), "
          f"each on its shard of every batch, its own runtime and budget")
    return comm


def run_training(rt, model, opt, next_batch, args, steps, progress=True, log=print, dp=None,
                 lr_at=None, clip=None):
    """steps optimizer steps on next_batch(rng) -> (inputs, targets); returns the runtime,
    model, losses, arena bytes used after each forward and the running peak. With dp (a
    coop.distributed.DataParallel), gradients are averaged over the ranks after backward and
    the losses are the ranks' mean (local_losses: this rank's). lr_at(step): the learning
    rate of each step; clip: the largest global gradient norm (coop.optim.clip_grad_norm)."""
    in_backward = getattr(args, "update_in_backward", False)
    if in_backward and (clip or dp is not None):
        raise ValueError(IN_BACKWARD_CONFLICT)
    rng = np.random.default_rng(args.seed)
    losses, local_losses, used, peaks = [], [], [], []
    bar = tqdm(range(steps), desc=f"train {args.policy}", disable=not progress, leave=False)
    for step in bar:
        loss = model.loss(*next_batch(rng))
        local_losses.append(float(loss.numpy()))
        losses.append(dp.mean(local_losses[-1]) if dp is not None else local_losses[-1])
        used.append(rt.arena.stats()["used_bytes"])
        if in_backward:
            if lr_at is not None:
                opt.lr = lr_at(step)
            opt.backward_step(loss)     # backward, step and zero_grad, bit for bit
            del loss
        else:
            loss.backward()
            del loss   # not needed (backward releases the graph); frees the value at once
            if dp is not None:
                dp.sync_gradients()
            if clip:
                optim.clip_grad_norm(opt.params, clip)
            if lr_at is not None:
                opt.lr = lr_at(step)
            opt.step()
            opt.zero_grad()
        if dp is not None and getattr(args, "check_identical", False):
            dp.check_identical()
        peaks.append(rt.arena.stats()["peak_used_bytes"])
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if log and args.log_every and (step % args.log_every == 0 or step == steps - 1):
            (bar.write if progress else log)(f"step {step:5d}  loss {losses[-1]:.4f}  arena used "
                                             f"{used[-1] / MB:.2f} MiB")
    bar.close()
    return dict(rt=rt, model=model, losses=losses, local_losses=local_losses, used=used,
                peaks=peaks)


def print_summary(model_rows, budget, peak, stats, train_time, total_time):
    """The end-of-run table: the example's own rows, then budget, memory and recompute figures."""
    rows = list(model_rows) + [("budget (MiB)", f"{budget / MB:.3f}")]
    if peak is not None:
        rows.append(("unlimited peak (MiB)", f"{peak / MB:.3f}"))
    rows += [("peak arena used (MiB)", f"{stats['peak_used_bytes'] / MB:.3f}"),
             ("evictions", f"{stats['evictions']:,}"),
             ("recomputes", f"{stats['recomputes']:,}"),
             ("compute overhead", f"{stats['compute_overhead']:.3f}")]
    if stats.get("offloads"):      # an offloading policy's host tier
        rows += [("offloads to the host tier", f"{stats['offloads']:,}"),
                 ("MiB to the host / back", f"{stats['bytes_d2h'] / MB:.1f} / "
                                            f"{stats['bytes_h2d'] / MB:.1f}"),
                 ("host tier peak (MiB)", f"{stats['host_peak_bytes'] / MB:.3f}")]
    rows += [("training time (s)", f"{train_time:.1f}"),
             ("total time incl. probe (s)", f"{total_time:.1f}")]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k:<{width}}  {v:>12}")


def plot_run(run, budget, out, name, title, lines):
    """Loss curve (with reference lines: (value, label, style)) over arena use, to the PNG
    out/name; prints and returns its path."""
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    steps = np.arange(len(run["losses"]))
    a.plot(steps, run["losses"], lw=1, label="train loss")
    for (value, label, style), color in zip(lines, ("gray", "C2", "C3")):
        a.axhline(value, color=color, ls=style, lw=1, label=label)
    a.set_ylabel("loss (nats)")
    a.legend()
    a.set_title(title)
    b.plot(steps, np.array(run["used"]) / MB, lw=1, label="arena used after forward")
    b.plot(steps, np.array(run["peaks"]) / MB, lw=1, label="arena peak so far")
    b.axhline(budget / MB, color="red", ls="--", lw=1, label="budget")
    b.set_xlabel("step")
    b.set_ylabel("MiB")
    b.legend()
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"saved {path}")
    return path
