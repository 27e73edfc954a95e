"""The summary table of benchmarks/device_check.sh, from what its sections left in OUT.

OUT/status.tsv has one line per section: name, exit status, seconds ("-" and a reason when it
did not run: "no device", "out of time"). Tests are read from OUT/tests_*.log (pytest's last
line), probes from OUT/probes.json, allocation speed from OUT/alloc.json, GPT runs from
OUT/gpt_*.json, the timing overhead from the probes, the host tier from its tests' log and its
round-trip probe. Prints one table; exit status 1 when a row failed.

Run: python benchmarks/device_summary.py OUT
"""
import glob
import json
import os
import re
import sys

ROWS = [  # (row, the sections it reads)
    ("build", ["build"]),
    ("collect", ["collect"]),
    ("collect, no libmpi", ["collect_nompi"]),
    ("tests", ["tests"]),
    ("probes", ["probes"]),
    ("malloc/free vs CuPy", ["bench_alloc"]),
    ("GPT bit-exact 0.5x", ["gpt"]),
    ("GPT dropout 0.5x", ["gpt_dropout"]),
    ("GPT larger", ["gpt_large"]),
    ("timing overhead", ["probes"]),
    ("host tier", ["probes"]),
]
COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def statuses(out):
    found = {}
    try:
        with open(os.path.join(out, "status.tsv")) as f:
            for line in f:
                name, rc, seconds, *why = line.rstrip("\n").split("\t")
                found[name] = (rc, seconds, why[0] if why else "")
    except OSError:
        pass
    return found


def pytest_counts(text):
    """{'passed': n, ...} from pytest's last summary line in text."""
    lines = [line for line in text.splitlines() if COUNT.search(line) or "no tests ran" in line]
    counts = {}
    for n, what in COUNT.findall(lines[-1] if lines else ""):
        counts["errors" if what.startswith("error") else what] = int(n)
    return counts


def tests_row(out):
    total, bad = {}, []
    for log in sorted(glob.glob(os.path.join(out, "tests_*.log"))):
        with open(log, errors="replace") as f:
            counts = pytest_counts(f.read())
        name = os.path.basename(log)[6:-4]
        if not counts:
            bad.append(f"{name}: no result")
        for what, n in counts.items():
            total[what] = total.get(what, 0) + n
        if counts.get("failed") or counts.get("errors"):
            bad.append(f"{name}: {counts.get('failed', 0)} failed, {counts.get('errors', 0)} errors")
    detail = ", ".join(f"{n} {what}" for what, n in total.items()) or "no results"
    return (not bad and total.get("passed", 0) > 0), detail + ("; " + "; ".join(bad) if bad else "")


def host_tier_row(out, probes):
    """The host tier's tests (their own log) and its 256 MiB round trip (a probe)."""
    try:
        with open(os.path.join(out, "tests_test_cupy_host_tier.log"), errors="replace") as f:
            counts = pytest_counts(f.read())
    except OSError:
        counts = {}
    probe = probes.get("host_tier_round_trip") or {}
    tests = ", ".join(f"{n} {what}" for what, n in counts.items()) or "no result"
    ok = (probe.get("ok") is True and counts.get("passed", 0) > 0
          and not counts.get("failed") and not counts.get("errors"))
    return ok, f"tests {tests}; {probe.get('detail', 'round trip not probed')}"


def collect_row(out, name):
    try:
        with open(os.path.join(out, f"{name}.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return False, "no log"
    match = re.search(r"(\d+)(?:/\d+)? tests? collected", text)
    errors = re.findall(r"^ERROR (\S+)", text, re.M)
    detail = f"{match.group(1) if match else 0} cuda tests collected"
    if errors:
        detail += f", collection errors (not fatal) in {', '.join(errors)}"
    return (match is not None and not errors), detail


def row(out, name, section, status):
    if section == "tests":
        return tests_row(out)
    if section in ("collect", "collect_nompi"):
        return collect_row(out, section)
    rc = status[0]
    if section == "build":
        return rc == "0", f"{status[1]} s"
    if section == "probes":
        probes = load(os.path.join(out, "probes.json")) or {}
        if name == "timing overhead":
            ratio = probes.get("timing_overhead_ratio")
            probe = probes.get("timing_overhead") or {}
            return (probe.get("ok") is not False and ratio is not None,
                    probe.get("detail", "not measured"))
        if name == "host tier":
            return host_tier_row(out, probes)
        kinds = [r["ok"] for r in probes.values() if isinstance(r, dict)]
        failed = [k for k, r in probes.items() if isinstance(r, dict) and r["ok"] is False]
        return (rc == "0" and bool(kinds)), (f"{kinds.count(True)} pass, {len(failed)} fail, "
                                             f"{kinds.count(None)} info"
                                             + (f" (failed: {', '.join(failed)})" if failed else ""))
    if section == "bench_alloc":
        alloc = load(os.path.join(out, "alloc.json"))
        if not alloc:
            return False, "no alloc.json"
        ratios = []
        for size, r in alloc["rows"].items():
            if "cupy pool.malloc" in r:
                ratios.append(f"{size} B: coop {r['coop pool.malloc']:.2f} us, CuPy "
                              f"{r['cupy pool.malloc']:.2f} us")
        return rc == "0" and bool(ratios), "; ".join(ratios) or "CuPy's pool not measured"
    if section in ("gpt", "gpt_dropout", "gpt_large"):
        wanted = {"gpt": lambda path: path.endswith("_dropout0.0.json"),   # the example's GPT
                  "gpt_dropout": lambda path: "_model" not in path and
                  not path.endswith("_dropout0.0.json"),
                  "gpt_large": lambda path: "_model" in path}[section]     # gpt_check --model
        runs = [path for path in sorted(glob.glob(os.path.join(out, "gpt_cupy_dropout*.json")))
                if wanted(path)]
        result = load(runs[-1]) if runs else None
        if not result:
            return False, "no result"
        part = result["ratio"]
        detail = (f"{'bit-exact' if result['bitexact'] else 'DIFFERS'}, "
                  f"{part['evictions']} evictions, {part['recomputes']} recomputes")
        warm = result.get("unlimited_warm")
        if warm:
            oom = [r["ratio"] for r in result.get("ratios_out_of_memory", [])]
            detail = (f"{result.get('ratio_used', '?')}x"
                      + (f" ({', '.join(f'{r}x' for r in oom)}: out of memory)" if oom else "")
                      + f": {detail}; peak {result['unlimited']['peak'] / 2**20:.0f} MiB, wall "
                      f"time {part['seconds'] / warm['seconds']:.2f}x the unlimited run's")
        return bool(result["bitexact"]), detail
    return rc == "0", ""


def main(out):
    status = statuses(out)
    lines, failed = [], False
    for name, sections in ROWS:
        section = sections[0]
        st = status.get(section)
        if st is None:
            lines.append((name, "not run", ""))
            failed = True
            continue
        if st[0] == "-":
            lines.append((name, st[2], ""))
            failed |= st[2] != "no device"
            continue
        ok, detail = row(out, name, section, st)
        lines.append((name, "ok" if ok else "FAIL", detail))
        failed |= not ok
    width = max(len(n) for n, _, _ in lines)
    print("==== coop device check: summary ====")
    print(f"{'step':{width}s}  {'result':9s}  detail")
    for name, result, detail in lines:
        print(f"{name:{width}s}  {result:9s}  {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench-out/device"))
