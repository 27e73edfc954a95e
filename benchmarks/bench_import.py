"""What `import coop` costs: coop modules loaded, all modules loaded, and seconds, in a fresh
interpreter each run (median of --repeat runs).

Measured: `import coop` alone (the core API), and `import coop` followed by touching
coop.nn, coop.ops, coop.optim and coop.models (what `import coop` loaded before they became
lazy). Seconds are the import statement's wall time (time.perf_counter around it), not the
interpreter's start-up; with --numpy-first, NumPy (most of it) is imported before the timer.

Run: python benchmarks/bench_import.py [--repeat 5] [--root DIR] [--numpy-first]
(--root: the directory holding the coop package to measure; default: the one this Python
imports, so an older checkout with its extensions built can be compared.)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

PROBE = """
import sys, time
{pre}
t0 = time.perf_counter()
import coop
{extra}
t1 = time.perf_counter()
ours = [m for m in sys.modules if m == "coop" or m.startswith("coop.")]
print(__import__("json").dumps({{"seconds": t1 - t0, "coop_modules": len(ours),
                                 "modules": len(sys.modules), "file": coop.__file__}}))
"""
CASES = {
    "import coop": "",
    "import coop + nn, ops, optim, models": "coop.nn; coop.ops; coop.optim; coop.models",
}


def measure(extra, root, repeat, pre=""):
    env = dict(os.environ)
    if root:
        env["PYTHONPATH"] = root
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra, pre=pre)], env=env,
                             cwd=root or None, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "coop_modules": statistics.median(r["coop_modules"] for r in runs),
        "modules": statistics.median(r["modules"] for r in runs),
        "file": runs[0]["file"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--root", default=None, help="directory holding the coop package")
    parser.add_argument("--numpy-first", action="store_true",
                        help="import NumPy before the timer starts: coop's own share")
    args = parser.parse_args(argv)
    pre = "import numpy" if args.numpy_first else ""
    print(f"| case | coop modules | all modules | seconds (median of {args.repeat}) |")
    print("| --- | ---: | ---: | ---: |")
    for name, extra in CASES.items():
        m = measure(extra, args.root, args.repeat, pre)
        print(f"| {name} | {m['coop_modules']:.0f} | {m['modules']:.0f} | {m['seconds']:.3f} |")
    print(f"(coop from {os.path.dirname(m['file'])})")


if __name__ == "__main__":
    main()
