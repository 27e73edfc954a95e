"""One training step replayed, against the later steps of a training loop.

`coop bench` replays one training step of each paper model: its trace starts with the
parameters and optimizer state registered in an empty arena, and ends with the update. A
training loop's later steps start where the step before left the arena (and the host tier).
This script measures how far one step stands for them: it records each model for 1, 2, ...,
--steps steps (coop.models.paper's step repeated on the same inputs, the gradients dropped
between steps), replays every trace under each policy at each budget (a share of the one-step
trace's unlimited peak, the same bytes for every trace; --thrash stops a run far past the
bench's limit), and gives step k's compute overhead as the cost the k-th step adds (the
k-step replay's total less the (k-1)-step replay's) over one unlimited step's. Step 1 is the
one-step replay, the figure `coop bench` reports.

With --bench DIR (a `coop bench --out DIR` of the same optimizer and device), each policy's
minimum feasible ratio there is replayed too: whether a loop's later steps still complete
within the bench's thrash limit at the smallest budget one step did; with --scan SPAN, from
that minimum upward (0.01 at a time, up to SPAN above it) the first ratio where they do.

Prints a markdown table (OUT.md too), writes OUT.json (and OUT-scan.json) and draws OUT.png
(each later step's overhead against the one-step replay's; with --scan, the minima).

Run: python benchmarks/later_steps.py [--models bert_large,gpt2]
     [--policies coop,dtr,dte,dtr-ideal,coop-offload] [--ratios 0.5 0.3] [--steps 3]
     [--optimizer sgd] [--device a100-80gb] [--bench DIR] [--scan 0.2]
     [--out bench_out/later_steps] [--jobs 2]
"""
import argparse
import json
import math
import os
import sys
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

from coop.engine.cost import DEVICES  # noqa: E402
from coop.engine.policies import POLICIES  # noqa: E402
from coop.models import paper  # noqa: E402
from coop.trace import replay as R  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grid_minima import run_sweeps  # noqa: E402  (the pool of tasks, with a progress bar)


def trace_path(folder, model, optimizer, device, batch, steps):
    return os.path.join(folder, f"{model}-b{batch}-{optimizer}-{device}-{steps}steps.jsonl")


def record(folder, model, optimizer, device, batch, steps):
    """The model's traces of 1..steps steps (recorded unless present); their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for n in range(1, steps + 1):
        path = trace_path(folder, model, optimizer, device, batch, n)
        if not os.path.exists(path):
            paper.record_trace(model, path + ".tmp", batch=batch, optimizer=optimizer,
                               device=device, steps=n)
            os.replace(path + ".tmp", path)
        paths.append(path)
    return paths


def steps_of(results, cost_first):
    """Each step's compute overhead from the replays of 1..N steps (results[k-1]: the k-step
    replay): the cost step k adds over one unlimited step's cost (cost_first). None from the
    first replay that did not complete on."""
    out, before = [], 0.0
    for r in results:
        if r["status"] != "ok":
            out.extend([None] * (len(results) - len(out)))
            break
        out.append((r["cost_total"] - before) / cost_first)
        before = r["cost_total"]
    return out


def measure(task):
    """One (model, policy, ratio): every trace replayed at the one-step trace's ratio."""
    model, policy, ratio, paths, kind, thrash = task
    one = R.load(paths[0])
    budget = max(int(ratio * R.peak(one)), 1)
    results = []
    for path in paths:
        program = one if path == paths[0] else R.load(path)
        results.append(R.replay(program, budget=budget, policy=policy, thrash=thrash))
    overheads = steps_of(results, one.cost_first)
    later = [o for o in overheads[1:] if o is not None]
    return dict(model=model, policy=policy, ratio=ratio, kind=kind, budget_bytes=budget,
                statuses=[r["status"] for r in results], steps=overheads,
                one_step=overheads[0], later_max=max(later) if later else None,
                bytes_d2h=[r.get("bytes_d2h", 0) for r in results],
                bytes_h2d=[r.get("bytes_h2d", 0) for r in results])


def scan(task):
    """From a policy's one-step minimum upward, --step at a time: the first ratio where every
    step completes within the bench's thrash limit (None: none up to start + span)."""
    model, policy, start, paths, step, span, thrash = task
    k = 0
    while start + k * step <= start + span + 1e-9:
        ratio = round(start + k * step, 4)
        r = measure((model, policy, ratio, paths, "scan", thrash))
        if all(o is not None and o <= R.THRASH for o in r["steps"]):
            return dict(model=model, policy=policy, one_step_minimum=start, later_minimum=ratio,
                        row=r)
        k += 1
    return dict(model=model, policy=policy, one_step_minimum=start, later_minimum=None,
                row=None)


def scan_table(found):
    lines = ["| model | policy | one-step minimum (bench) | every step within the thrash "
             "limit from | its steps |",
             "| --- | --- | ---: | ---: | --- |"]
    for f in found:
        later = "none" if f["later_minimum"] is None else f"{f['later_minimum']:.2f}"
        steps = "-" if f["row"] is None else " / ".join(_fmt(x) for x in f["row"]["steps"])
        lines.append(f"| {f['model']} | {f['policy']} | {f['one_step_minimum']:.2f} | {later} | "
                     f"{steps} |")
    return "\n".join(lines)


def bench_minima(folder):
    """{(model, policy): smallest completing ratio} of a coop bench's runs.json."""
    with open(os.path.join(folder, "runs.json")) as f:
        rows = json.load(f)
    best = {}
    for r in rows:
        if r["status"] == "ok":
            key = (r["model"], r["policy"])
            best[key] = min(best.get(key, math.inf), round(r["ratio"], 2))
    return best


def _fmt(x):
    return "fails" if x is None else f"{x:.3f}"


def table(rows, thrash):
    n = max(len(r["steps"]) for r in rows)
    later = " | ".join(f"step {k}" for k in range(2, n + 1))
    lines = [f"| model | policy | ratio | one step (bench) | {later} | later - one step | "
             f"later steps within {thrash:g} |",
             "| --- | --- | ---: | ---: | " + "---: | " * (n - 1) + "---: | --- |"]
    for r in rows:
        tag = " (bench minimum)" if r["kind"] == "minimum" else ""
        gap = "-" if r["later_max"] is None or r["one_step"] is None \
            else f"{r['later_max'] - r['one_step']:+.3f}"
        ok = all(s is not None and s <= thrash for s in r["steps"][1:])
        lines.append(f"| {r['model']} | {r['policy']} | {r['ratio']:.2f}{tag} | "
                     f"{_fmt(r['one_step'])} | "
                     + " | ".join(_fmt(s) for s in r["steps"][1:])
                     + f" | {gap} | {'yes' if ok else 'no'} |")
    return "\n".join(lines)


def draw(rows, path, found=()):
    """OUT.png: each later step's overhead against the one-step replay's (left, at most 2.5:
    those above are counted in the title), and with a scan each policy's one-step minimum
    beside the ratio from which every step completes (right)."""
    fig, axes = plt.subplots(1, 2 if found else 1, figsize=(13 if found else 6.5, 5.8),
                             squeeze=False)
    ax = axes[0][0]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    markers = "os^Dvx*P"
    top, off = 2.5, 0
    for i, policy in enumerate(policies):
        xs, ys = [], []
        for r in rows:
            if r["policy"] != policy or r["one_step"] is None:
                continue
            for s in r["steps"][1:]:
                if s is None:
                    continue
                if s > top or r["one_step"] > top:
                    off += 1
                    continue
                xs.append(r["one_step"])
                ys.append(s)
        ax.scatter(xs, ys, marker=markers[i % len(markers)], label=policy, alpha=0.75)
    ax.plot([1.0, top], [1.0, top], color="gray", lw=1, ls="--", label="later step = one step")
    ax.set_xlim(0.95, top)
    ax.set_ylim(0.95, top)
    ax.set_xlabel("one-step replay's compute overhead (what coop bench reports)")
    ax.set_ylabel("a later step's compute overhead (the cost it adds)")
    ax.set_title("Where every step completes" + (f" ({off} later steps above {top} not drawn)"
                                                  if off else ""))
    ax.legend(fontsize=8)
    if found:
        ax = axes[0][1]
        models = list(dict.fromkeys(f["model"] for f in found))
        pols = list(dict.fromkeys(f["policy"] for f in found))
        width = 0.8 / max(len(pols), 1)
        for i, policy in enumerate(pols):
            for f in found:
                if f["policy"] != policy:
                    continue
                x = models.index(f["model"]) - 0.4 + (i + 0.5) * width
                y0 = f["one_step_minimum"]
                y1 = f["later_minimum"] if f["later_minimum"] is not None else y0 + 0.2
                ax.plot([x, x], [y0, y1], color=f"C{i}", lw=2)
                ax.scatter([x], [y0], color=f"C{i}", marker="o", facecolors="none")
                ax.scatter([x], [y1], color=f"C{i}",
                           marker="o" if f["later_minimum"] is not None else "^",
                           label=policy if f["model"] == models[0] else None)
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, rotation=35, ha="right")
        ax.set_ylabel("budget (share of the one-step peak)")
        ax.set_title("Minimum budget: one step (hollow) and every step (filled)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(paper.PAPER_MODELS),
                   help="comma-separated paper models (default: all nine)")
    p.add_argument("--policies", default="coop,dtr,dte,dtr-ideal,coop-offload")
    p.add_argument("--ratios", type=float, nargs="*", default=[0.5, 0.3])
    p.add_argument("--steps", type=int, default=3, help="the longest trace's steps (>= 2)")
    p.add_argument("--optimizer", default="sgd", choices=sorted(paper.OPTIMIZERS))
    p.add_argument("--device", default="a100-80gb", choices=sorted(DEVICES))
    p.add_argument("--batch", type=int, default=None, help="every model's batch (default: "
                   "the paper's)")
    p.add_argument("--bench", action="append", default=[], help="a `coop bench --out` folder "
                   "of the same optimizer and device (repeatable): each policy's minimum ratio "
                   "there is replayed too")
    p.add_argument("--thrash", type=float, default=4.0, help="stop a replay once its overhead "
                   "passes this (over all its steps; 0: never)")
    p.add_argument("--scan", type=float, default=0.0, metavar="SPAN", help="with --bench: "
                   "from each policy's minimum there upward, 0.01 at a time up to SPAN above "
                   "it, the first ratio where every step completes within the bench's thrash "
                   "limit")
    p.add_argument("--out", default=os.path.join("bench_out", "later_steps"),
                   help="writes OUT.md, OUT.json, OUT.png and the traces in OUT-traces/")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--no-progress", action="store_true")
    opts = p.parse_args(argv)
    models = [m for m in opts.models.split(",") if m]
    policies = [q for q in opts.policies.split(",") if q]
    for m in models:
        if m not in paper.PAPER_MODELS:
            p.error(f"unknown model {m!r}; choose from {', '.join(paper.PAPER_MODELS)}")
    for q in policies:
        if q not in POLICIES:
            p.error(f"--policies: unknown policy {q!r}; choose from {', '.join(POLICIES)}")
    if opts.steps < 2:
        p.error(f"--steps {opts.steps}: must be at least 2 (one step, and a later one)")
    if opts.jobs < 1:
        p.error(f"--jobs {opts.jobs}: must be at least 1")
    if any(not 0 < r < math.inf for r in opts.ratios):
        p.error(f"--ratios {opts.ratios}: each must be a number > 0")
    if opts.scan and not opts.bench:
        p.error("--scan needs --bench (the one-step minima to start from)")
    if not 0 <= opts.scan < 1:
        p.error(f"--scan {opts.scan}: must be a number in [0, 1)")
    if not 0 <= opts.thrash < math.inf:
        p.error(f"--thrash {opts.thrash}: must be a number >= 0")
    minima = {}
    for folder in opts.bench:
        minima.update(bench_minima(folder))
    print("command: python benchmarks/later_steps.py",
          " ".join(sys.argv[1:] if argv is None else argv))
    traces = opts.out + "-traces"
    tasks, scans = [], []
    for m in tqdm(models, desc="recording", disable=opts.no_progress):
        batch = paper.PAPER_MODELS[m].batch if opts.batch is None else opts.batch
        paths = record(traces, m, opts.optimizer, opts.device, batch, opts.steps)
        for q in policies:
            ratios = [(r, "ratio") for r in opts.ratios]
            if (m, q) in minima and minima[m, q] not in opts.ratios:
                ratios.append((minima[m, q], "minimum"))
            tasks.extend((m, q, r, paths, kind, opts.thrash) for r, kind in ratios)
            if opts.scan and (m, q) in minima:
                scans.append((m, q, minima[m, q], paths, 0.01, opts.scan, opts.thrash))
    if not tasks:
        p.error("nothing to replay: give --ratios, or --bench with minima for these models "
                "and policies")
    rows = list(run_sweeps(measure, tasks, opts.jobs, not opts.no_progress))
    rows.sort(key=lambda r: (models.index(r["model"]), policies.index(r["policy"]),
                             -r["ratio"]))
    text = table(rows, R.THRASH)
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    with open(opts.out + ".md", "w") as f:
        f.write(text + "\n")
    with open(opts.out + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    found = []
    if scans:
        found = list(run_sweeps(scan, scans, opts.jobs, not opts.no_progress))
        found.sort(key=lambda f: (models.index(f["model"]), policies.index(f["policy"])))
        text = scan_table(found)
        print(text)
        with open(opts.out + ".md", "a") as f:
            f.write("\n" + text + "\n")
        with open(opts.out + "-scan.json", "w") as f:
            json.dump(found, f, indent=1)
    draw(rows, opts.out + ".png", found)
    print(f"wrote {opts.out}.md, {opts.out}.json, {opts.out}.png")
    return rows


if __name__ == "__main__":
    main()
