"""benchmarks/grid_minima.py: minimum feasible ratios over shifted grids. The table is checked
on made-up minima (each figure known), the sweeps on one small recorded trace against coop
bench's own sweep of the same grid."""
import pytest
from _scripts import load_benchmark

from coop.cli import bench

grid_minima = load_benchmark("grid_minima")


def test_the_table_of_made_up_minima():
    mins = {"/t/m-b1.jsonl": {"coop": [0.30, 0.28, None], "dtr-ideal": [0.27, 0.27, 0.26]}}
    text = grid_minima.table(list(mins), mins, ["coop", "dtr-ideal"], 3, 0.02)
    row = text.splitlines()[-1]
    # coop: 0.30 on the bench grid, mean of 0.30 and 0.28; minus dtr-ideal's on the same grid:
    # +0.03 and +0.01 (the third grid has no coop minimum), one of two within +0.02
    assert row == ("| m | 0.30 / 0.290 (0.28-0.30) | 0.27 / 0.267 (0.26-0.27) | "
                   "+0.020 (+0.01 to +0.03), 1 of 2 |")


@pytest.mark.parametrize("args, message", [
    (["--policies", "coop"], "--policies needs two or more"),
    (["--policies", "coop,nope"], "--policies needs two or more"),
    (["--shifts", "0"], "--shifts must be >= 1"),
    (["--jobs", "0"], "--jobs must be >= 1"),
])
def test_bad_arguments_are_refused(tmp_path, capsys, args, message):
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    with pytest.raises(SystemExit):
        grid_minima.main([str(trace), *args])
    assert message in capsys.readouterr().err


def test_a_missing_trace_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        grid_minima.main([str(tmp_path / "none.jsonl")])
    assert "no such trace" in capsys.readouterr().err


def test_the_bench_grid_gives_coop_benchs_minimum(tmp_path):
    # the unshifted grid is coop bench's own: the same sweep, so the same minimum
    source, = bench.prepare(["unet"], [], str(tmp_path), quick=True)
    path = source["path"]
    grid, peak = grid_minima.grid_of(path)
    assert peak == source["peak_bytes"]
    rows = bench.sweep("unet", path, "coop", peak, grid, grid_minima.PATIENCE)
    want = min(r["ratio"] for r in rows if r["status"] == "ok")
    mins = grid_minima.measure([path], ["coop", "dtr-ideal"], 2, 1, progress=False)
    assert mins[path]["coop"][0] == want
    assert mins[path]["coop"][1] is not None and mins[path]["dtr-ideal"][0] is not None
