"""examples/train_gpt.py's GPT on one backend, unlimited and at a ratio of the unlimited peak,
in one process; prints whether the losses and the final parameters are equal bit for bit.
Run by benchmarks/device_check.sh; exit status 1 when they differ.

Run: python benchmarks/gpt_check.py [--backend cupy] [--steps 40] [--ratio 0.5[,0.6...]]
     [--dropout 0.0] [--cost cpu] [--model LAYERS,HEADS,D_MODEL,BLOCK,BATCH] [--out DIR]
(--model: a larger GPT than the example's 4,4,64,64,16, e.g. 8,8,512,256,32 on a GPU, with
--unlimited large enough for it. --ratio: several, comma-separated, are tried in turn until one
completes; the ones that ran out of memory are printed and kept in the JSON.)
"""
import argparse
import hashlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import numpy as np  # noqa: E402

import train_gpt  # noqa: E402

import coop  # noqa: E402


def run(args, data, budget):
    size = []
    if args.model:
        layers, heads, d_model, block, batch = (int(v) for v in args.model.split(","))
        size = ["--layers", str(layers), "--heads", str(heads), "--d-model", str(d_model),
                "--block", str(block), "--batch", str(batch)]
    ex = train_gpt.parser().parse_args(
        ["--backend", args.backend, "--steps", str(args.steps), "--dropout", str(args.dropout),
         "--cost", args.cost, "--no-progress", "--log-every", "0", *size])
    start = time.perf_counter()
    out = train_gpt.train(ex, data, budget, args.steps, progress=False, log=None)
    digest = hashlib.sha256()
    for p in out["model"].parameters():
        digest.update(np.ascontiguousarray(p.numpy()).tobytes())
    stats = out["rt"].stats()
    return dict(budget=budget, losses=[v.hex() for v in out["losses"]],
                params_sha256=digest.hexdigest(), seconds=time.perf_counter() - start,
                peak=stats["peak_used_bytes"], evictions=stats["evictions"],
                recomputes=stats["recomputes"], overhead=stats["compute_overhead"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cupy")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ratio", default="0.5", help="a ratio, or several: 0.5,0.6")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--cost", default="cpu")
    parser.add_argument("--unlimited", default="4GiB")
    parser.add_argument("--model", default=None,
                        help="LAYERS,HEADS,D_MODEL,BLOCK,BATCH (default: the example's)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]), flush=True)
    text, _ = train_gpt.build_corpus()
    data = train_gpt.CharData(text, 0.1)
    full = run(args, data, args.unlimited)
    failed, warm = [], None
    for ratio in (float(r) for r in args.ratio.split(",")):
        budget = int(full["peak"] * ratio) // 512 * 512
        try:
            part = run(args, data, budget)
            break
        except coop.OutOfMemoryError as err:
            failed.append(dict(ratio=ratio, error=str(err)[:400]))
            print(f"  {ratio}x: out of memory: {str(err)[:300]}")
    else:
        print(f"DIFFER: no ratio of {args.ratio} completed")
        return 1
    runs = [("unlimited", full), (f"{ratio}x", part)]
    if args.model:   # the first run compiled the kernels: time the unlimited run again, warm
        warm = run(args, data, args.unlimited)
        runs.append(("unlimited, warm", warm))
        print(f"  wall time {ratio}x / unlimited (warm): "
              f"{part['seconds'] / warm['seconds']:.3f}; warm rerun bit-identical: "
              f"{warm['losses'] == full['losses']}")
    first = next((i for i, (a, b) in enumerate(zip(full["losses"], part["losses"])) if a != b),
                 None)
    same = first is None and full["params_sha256"] == part["params_sha256"]
    for name, r in runs:
        print(f"  {name:>15}: budget {r['budget']}, peak {r['peak']}, evictions {r['evictions']}, "
              f"recomputes {r['recomputes']}, overhead {r['overhead']:.3f}, {r['seconds']:.1f} s, "
              f"last loss {float.fromhex(r['losses'][-1]):.6f}")
    print(f"{'BITEXACT' if same else 'DIFFER'} dropout {args.dropout}: {args.steps} steps, first "
          f"differing step {first}, parameters equal {full['params_sha256'] == part['params_sha256']}")
    tag = f"gpt_{args.backend}_dropout{args.dropout}" + (
        f"_model{args.model.replace(',', '-')}" if args.model else "")
    with open(os.path.join(args.out, f"{tag}.json"), "w") as f:
        json.dump({"unlimited": full, "ratio": part, "bitexact": same, "ratio_used": ratio,
                   "ratios_out_of_memory": failed,
                   **({"unlimited_warm": warm} if warm else {})}, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
