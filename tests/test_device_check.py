"""benchmarks/device_summary.py, the device check's table, read from results a GPU run leaves
(made up here: no GPU has to run for the parsing to be checked); benchmarks/device_probes.py
without a device."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = os.path.join(ROOT, "benchmarks", "device_summary.py")


def summarize(out):
    run = subprocess.run([sys.executable, SUMMARY, str(out)], capture_output=True, text=True)
    rows = {}
    for line in run.stdout.splitlines()[2:]:
        name, rest = line[:19].strip(), line[21:]
        rows[name] = (rest[:9].strip(), rest[11:])
    return run.returncode, rows


def write(out, name, text):
    (out / name).write_text(text)


def gpu_run(out, *, failed_test=False, differs=False):
    status = [("build", 0, 50), ("collect", 0, 9), ("collect_nompi", 0, 9), ("tests", 0, 80),
              ("probes", 0, 40), ("bench_alloc", 0, 30), ("gpt", 0, 60), ("gpt_dropout", 0, 40),
              ("gpt_large", 0, 90)]
    write(out, "status.tsv", "".join(f"{n}\t{rc}\t{s}\t\n" for n, rc, s in status))
    write(out, "collect.log", "...\n101/1984 tests collected (1883 deselected) in 3.2s\n")
    write(out, "collect_nompi.log", "ERROR tests/test_bench.py\n100/1974 tests collected "
                                    "(1874 deselected), 1 error in 3.0s\n")
    write(out, "tests_test_random.log", "....\n4 passed, 12 deselected in 2.1s\n")
    write(out, "tests_test_cupy_pool.log",
          "F.\n1 failed, 23 passed in 1.0s\n" if failed_test else "..\n24 passed in 1.0s\n")
    write(out, "tests_test_cupy_host_tier.log", "....\n20 passed in 3.0s\n")
    write(out, "probes.json", json.dumps({
        "reservation": {"ok": True, "detail": ""}, "costs": {"ok": None, "detail": ""},
        "timing_overhead": {"ok": True, "detail": "x1.08"}, "timing_overhead_ratio": 1.08,
        "host_tier_round_trip": {"ok": not differs, "detail": "d2h 50.1 GB/s"},
        "host_tier_d2h_bytes_per_s": 50.1e9,
        "host_link_curve_bytes_per_s": [["h2d 64 KiB", 3.8e9], ["d2h 64 KiB", 4.2e9]]}))
    write(out, "alloc.json", json.dumps({"gpu": True, "rows": {"512": {
        "coop pool.malloc": 1.5, "cupy pool.malloc": 1.25}}}))
    for dropout, same in (("0.0", not differs), ("0.1", True)):
        write(out, f"gpt_cupy_dropout{dropout}.json", json.dumps({
            "bitexact": same, "ratio": {"evictions": 12, "recomputes": 30}}))
    write(out, "gpt_cupy_dropout0.0_model8-8-512-256-32.json", json.dumps({
        "bitexact": True, "ratio": {"evictions": 70, "recomputes": 90, "seconds": 6.0},
        "ratio_used": 0.6, "ratios_out_of_memory": [{"ratio": 0.5, "error": "..."}],
        "unlimited": {"peak": 3 << 30, "seconds": 9.0},
        "unlimited_warm": {"peak": 3 << 30, "seconds": 5.0}}))


def test_a_passing_gpu_run_reads_ok_in_every_row_but_a_collection_error(tmp_path):
    gpu_run(tmp_path)
    rc, rows = summarize(tmp_path)
    assert rows["tests"] == ("ok", "48 passed, 12 deselected")
    assert rows["probes"] == ("ok", "3 pass, 0 fail, 1 info")
    assert rows["host tier"] == ("ok", "tests 20 passed; d2h 50.1 GB/s")
    assert rows["malloc/free vs CuPy"] == ("ok", "512 B: coop 1.50 us, CuPy 1.25 us")
    assert rows["GPT bit-exact 0.5x"] == ("ok", "bit-exact, 12 evictions, 30 recomputes")
    assert rows["GPT dropout 0.5x"] == ("ok", "bit-exact, 12 evictions, 30 recomputes")
    assert rows["GPT larger"] == ("ok", "0.6x (0.5x: out of memory): bit-exact, 70 evictions, "
                                        "90 recomputes; peak 3072 MiB, wall time 1.20x the "
                                        "unlimited run's")
    assert rows["timing overhead"] == ("ok", "x1.08")
    assert rows["collect"] == ("ok", "101 cuda tests collected")
    assert rows["collect, no libmpi"][0] == "FAIL" and "tests/test_bench.py" in \
        rows["collect, no libmpi"][1]
    assert rc == 1


def test_a_failing_test_file_and_a_differing_gpt_fail_their_rows_only(tmp_path):
    gpu_run(tmp_path, failed_test=True, differs=True)
    rc, rows = summarize(tmp_path)
    assert rows["tests"][0] == "FAIL" and "test_cupy_pool: 1 failed, 0 errors" in rows["tests"][1]
    assert rows["GPT bit-exact 0.5x"][0] == "FAIL" and rows["GPT dropout 0.5x"][0] == "ok"
    assert rows["host tier"] == ("FAIL", "tests 20 passed; d2h 50.1 GB/s")
    assert rows["probes"][1] == "2 pass, 1 fail, 1 info (failed: host_tier_round_trip)"
    assert rc == 1


def test_without_a_device_every_gpu_row_reads_no_device(tmp_path):
    write(tmp_path, "status.tsv", "build\t0\t60\t\ncollect\t0\t9\t\ncollect_nompi\t0\t9\t\n" + "".join(
        f"{n}\t-\t-\tno device\n" for n in ("tests", "probes", "bench_alloc", "gpt", "gpt_dropout",
                                            "gpt_large")))
    write(tmp_path, "collect.log", "101/1984 tests collected (1883 deselected) in 3.2s\n")
    write(tmp_path, "collect_nompi.log", "100/1974 tests collected (1874 deselected) in 3.0s\n")
    rc, rows = summarize(tmp_path)
    assert rc == 0 and rows["build"] == ("ok", "60 s")
    assert [rows[n][0] for n in ("tests", "probes", "malloc/free vs CuPy", "GPT bit-exact 0.5x",
                                 "GPT dropout 0.5x", "timing overhead", "host tier")] == \
        ["no device"] * 7


def test_the_probes_without_a_device_say_so_and_exit_3(tmp_path):
    """A machine without a GPU (this one, CI): the probes stop at once, write nothing."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.is_available():
        pytest.skip("a CUDA device is visible: the probes would run")
    probes = os.path.join(ROOT, "benchmarks", "device_probes.py")
    # the coop this interpreter imports (installed, or built in place), not the source tree:
    # a checkout installed with pip has no compiled modules in it
    run = subprocess.run([sys.executable, probes, "--out", str(tmp_path), "--only",
                          "host_link,host_tier"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert (run.returncode, run.stdout) == (3, "no CUDA device visible to CuPy: nothing to "
                                               "probe\n"), run.stderr
    assert list(tmp_path.iterdir()) == []
    run = subprocess.run([sys.executable, probes, "--only", "host_teir"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 2 and "no probe named host_teir; probes: costs," in run.stderr
