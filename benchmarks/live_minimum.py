"""The smallest budget at which a live training run completes: examples/train_gpt.py's GPT
(or --example cnn: examples/train_cnn.py's ResNet), trained for a few steps on the host
backend at falling ratios of its unlimited peak, per policy. A live run allocates every
kernel's temporaries in the arena beside its pinned inputs (`coop bench`'s simulated traces
have none), so how many arrays a kernel holds at once can set the smallest budget.

    python benchmarks/live_minimum.py [--example gpt|cnn] [--policies coop,coop-offload]
        [--steps 10] [--ratios 0.6:0.2:0.02] [--replay] [--out DIR] [--label NAME]
        [--example-args "--clip 0 --update-in-backward"]
    python benchmarks/live_minimum.py --compare A.json B.json [--png FILE]

--replay also records the unlimited run and replays its trace at the same ratios (coop
replay's replayer), for the replay's minimum beside the live one. Writes
DIR/live_minimum_<example>_<label>.json; --compare prints two such files side by side and draws
them (the overhead at each budget that completed, a cross where it ran out of memory; budgets
in MiB, since the builds' peaks may differ).
"""
import argparse
import json
import os
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def ratios(spec):
    high, low, step = (float(v) for v in spec.split(":"))
    out, r = [], high
    while r >= low - 1e-9:
        out.append(round(r, 4))
        r -= step
    return out


def measure(args):
    import numpy as np
    from tqdm import tqdm

    import coop
    if args.example == "gpt":
        import train_gpt as example
        text, _ = example.build_corpus()
        data = example.CharData(text, 0.1)
    else:
        import train_cnn as example
        data = example.load_digits(0.2, 0)

    recordings = []

    def run(budget, policy, record=None):
        if record is not None:     # the example makes its runtime: record from its start
            make = example.make_runtime

            def make_runtime(*a, **k):
                rt = make(*a, **k)
                recordings.append(rt.record(record))
                recordings[-1].__enter__()
                return rt
            example.make_runtime = make_runtime
        try:
            return _run(budget, policy)
        finally:
            if record is not None:
                example.make_runtime = make
                while recordings:
                    recordings.pop().__exit__(None, None, None)

    def _run(budget, policy):
        ex = example.parser().parse_args(["--steps", str(args.steps), "--policy", policy,
                                          "--no-progress", "--log-every", "0",
                                          *shlex.split(args.example_args)])
        out = example.train(ex, data, budget, args.steps, progress=False, log=None)
        stats = out["rt"].stats()
        return out, stats

    trace = os.path.join(args.out, f"live_minimum_{args.example}.jsonl") if args.replay else None
    if trace:
        os.makedirs(args.out, exist_ok=True)
    full, stats = run("1GiB", "coop", trace)
    peak = stats["peak_used_bytes"]
    losses = [float(v) for v in full["losses"]]
    result = dict(label=args.label, example=args.example, steps=args.steps, peak=peak,
                  policies={})
    todo = [(p, r) for p in args.policies.split(",") for r in ratios(args.ratios)]
    failed = {p: 0 for p in args.policies.split(",")}
    bar = tqdm(todo, desc="live runs", disable=args.no_progress)
    for policy, ratio in bar:
        if failed[policy] >= args.patience:
            continue
        bar.set_postfix(policy=policy, ratio=ratio)
        budget = int(peak * ratio) // 64 * 64
        start = time.perf_counter()
        try:
            out, st = run(budget, policy)
            same = [float(v) for v in out["losses"]] == losses
            row = dict(ratio=ratio, status="ok", overhead=st["compute_overhead"],
                       evictions=st["evictions"], recomputes=st["recomputes"],
                       offloads=st.get("offloads", 0), bit_identical=same)
            failed[policy] = 0
        except coop.OutOfMemoryError as err:
            row = dict(ratio=ratio, status="oom", error=str(err)[:300])
            failed[policy] += 1
        except coop.errors.Thrash as err:
            row = dict(ratio=ratio, status="thrash", error=str(err)[:300])
            failed[policy] += 1
        row["seconds"] = time.perf_counter() - start
        result["policies"].setdefault(policy, []).append(row)
    for policy, rows in result["policies"].items():
        done = [r["ratio"] for r in rows if r["status"] == "ok"]
        result.setdefault("minimum", {})[policy] = min(done) if done else None
    if trace:                      # the same ratios and patience, replayed
        from coop.trace import replay as R
        for policy in args.policies.split(","):
            done, failures = [], 0
            for ratio in ratios(args.ratios):
                if failures >= args.patience:
                    break
                ok = R.replay(trace, ratio=ratio, policy=policy)["status"] == "ok"
                done += [ratio] if ok else []
                failures = 0 if ok else failures + 1
            result.setdefault("replay_minimum", {})[policy] = min(done) if done else None
    del np
    return result


def table(results):
    policies = sorted({p for r in results for p in r["policies"]})
    name = {"gpt": "examples/train_gpt.py's GPT", "cnn": "examples/train_cnn.py's ResNet"}[
        results[0].get("example", "gpt")]
    print(f"live minimum of {name} ({results[0]['steps']} steps; peak "
          + ", ".join(f"{r['label']} {r['peak'] / 2**20:.2f} MiB" for r in results) + ")")
    print("| policy | " + " | ".join(r["label"] for r in results) + " |")
    print("| --- |" + " ---: |" * len(results))
    for p in policies:   # the ratio of the build's own peak, and the budget it is
        print(f"| {p} | " + " | ".join(
            f"{r['minimum'][p]:.2f} ({r['minimum'][p] * r['peak'] / 2**20:.2f} MiB)"
            if r.get("minimum", {}).get(p) is not None else "-" for r in results) + " |")
    for r in results:
        if r.get("replay_minimum"):
            print(f"{r['label']}: the unlimited run's trace replays down to " + ", ".join(
                f"{v} under {p}" for p, v in r["replay_minimum"].items()))
    for r in results:
        for p, rows in r["policies"].items():
            bad = [row["ratio"] for row in rows if row["status"] == "ok"
                   and not row["bit_identical"]]
            print(f"{r['label']} {p}: " + ", ".join(
                f"{row['ratio']:.2f} {row['overhead']:.3f}" if row["status"] == "ok"
                else f"{row['ratio']:.2f} {row['status']}" for row in rows)
                + (f"; NOT bit-identical at {bad}" if bad else "; every completed run "
                   "bit-identical to the unlimited one"))


def draw(results, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, r in enumerate(results):
        for j, (p, rows) in enumerate(sorted(r["policies"].items())):
            mib = r["peak"] / 2**20
            ok = [(row["ratio"] * mib, row["overhead"]) for row in rows
                  if row["status"] == "ok"]
            bad = [row["ratio"] * mib for row in rows if row["status"] != "ok"]
            line, = ax.plot(*zip(*ok), marker="o", ls="-" if k else "--",
                            label=f"{p}, {r['label']}") if ok else (None,)
            if bad:
                ax.scatter(bad, [1.0] * len(bad), marker="x",
                           color=line.get_color() if line else None)
    ax.set_xlabel("budget (MiB)")
    ax.set_ylabel("compute overhead (x: out of memory)")
    ax.set_title({"gpt": "examples/train_gpt.py's GPT", "cnn": "examples/train_cnn.py's ResNet"}[
        results[0].get("example", "gpt")] + ", live on the host backend")
    ax.invert_xaxis()
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print("wrote", png)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--example", default="gpt", choices=["gpt", "cnn"])
    p.add_argument("--policies", default="coop,coop-offload")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ratios", default="0.6:0.2:0.02", help="high:low:step")
    p.add_argument("--patience", type=int, default=3, help="stop a policy after N failures")
    p.add_argument("--label", default="this build")
    p.add_argument("--example-args", default="",
                   help='more options for the example, e.g. "--clip 0 --update-in-backward"')
    p.add_argument("--replay", action="store_true",
                   help="also replay the unlimited run's trace at the same ratios")
    p.add_argument("--out", default="bench-out")
    p.add_argument("--compare", nargs=2, metavar="JSON")
    p.add_argument("--png", default=None)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    print("command:", " ".join([sys.executable, *(sys.argv if argv is None else
                                                  [__file__, *argv])]), flush=True)
    if args.compare:
        results = []
        for path in args.compare:
            with open(path) as f:
                results.append(json.load(f))
        table(results)
        if args.png:
            draw(results, args.png)
        return 0
    result = measure(args)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out,
                        f"live_minimum_{args.example}_{args.label.replace(' ', '_')}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    table([result])
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
