"""benchmarks/bench_core.py run as a script (as the README runs it), on small sizes: it loads
the plain-Python reference arena from tests/ and prints all three parts."""
import os
import subprocess
import sys

from _scripts import BENCHMARKS


def test_bench_core_runs_as_a_script_from_the_checkout(tmp_path):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)          # tests/ is not on the path, as from a shell
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "bench_core.py"), "--repeat", "1",
         "--pairs", "400", "--live", "20", "--sizes", "100", "300", "--ref-max-n", "100",
         "--victims", "200", "--ref-victims", "50", "--out", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "a. allocate/free pairs per second (400 pairs, ~20 live)" in text
    assert "b. coop window search" in text and "c. one allocate_or_evict" in text
    assert "dtr / coop search time:" in text
    assert (tmp_path / "window_search.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
