"""benchmarks/bench_host.py run as a script, on small sizes: all three parts print their
tables (part C asserts, inside the script, that the tier's variants train bit-identically and
never evict or offload at its budget)."""
import os
import subprocess
import sys

from _scripts import BENCHMARKS


def run(tmp_path, *args):
    return subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "bench_host.py"), "--repeat", "1",
         "--steps", "1", "--width", "64", "--ops", "20", "--gpt-steps", "1", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_bench_host_prints_all_three_parts(tmp_path):
    out = run(tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "A. allocator overhead: MLP 4x64, batch 64, 1 steps" in text
    assert "B. per-op overhead: coop.apply vs the kernel called directly" in text
    assert "C. the host tier's per-op bookkeeping" in text
    part_c = text[text.index("C. the host tier's"):]
    rows = [line.rsplit(None, 4) for line in part_c.splitlines()[2:5]]   # under the header
    assert [r[0] for r in rows] == ["coop", "coop-offload", "coop-offload, lookahead 8"]
    assert rows[0][-2:] == ["1.000", "1.000"]       # coop against itself


def test_bench_host_runs_only_the_parts_asked_for(tmp_path):
    out = run(tmp_path, "--parts", "C")
    assert out.returncode == 0, out.stderr
    assert "A. allocator" not in out.stdout and "B. per-op" not in out.stdout
    assert "C. the host tier's per-op bookkeeping" in out.stdout
