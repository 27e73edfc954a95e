"""benchmarks/tier_table.py: the host tier's table, claims and figure from `coop bench` sweeps."""
from _scripts import load_benchmark

from coop.cli.main import main as coop_main

tier_table = load_benchmark("tier_table")


def test_a_sweep_gives_the_table_the_same_runs_and_the_figure(tmp_path, capsys):
    """A small sweep of coop and coop-offload: one table row per model with the bound, the
    floor and both minima (the summary's figures), the count of ratios where coop completes
    and coop-offload makes the same run (every one of them: the tier only opens where coop
    cannot complete), and a PNG."""
    out = tmp_path / "sweep"
    assert coop_main(["bench", "--quick", "--models", "unet", "--policies", "coop,coop-offload",
                      "--step", "0.25", "--jobs", "1", "--no-progress", "--out", str(out)]) == 0
    capsys.readouterr()
    png = tmp_path / "tier.png"
    tier_table.main([str(out), "--png", str(png)])
    text = capsys.readouterr().out.splitlines()
    summary, rows = tier_table.load(str(out))
    m = summary["models"]["unet"]
    assert text[0].startswith("| model | a100 sgd: bound / floor | coop | coop-offload |")
    assert text[2] == (f"| unet | {m['lower_bound_ratio']:.2f} / {m['offload_floor_ratio']:.2f} "
                       f"| {m['policies']['coop']['min_feasible_ratio']:.2f} "
                       f"| {m['policies']['coop-offload']['min_feasible_ratio']:.2f} |")
    done = sum(1 for (model, policy, ratio), r in rows.items()
               if policy == "coop" and r["status"] == "ok")
    assert done > 0
    assert f"the same run at {done} of the {done} ratios where coop completes" in text[4]
    assert png.stat().st_size > 0 and text[-1] == f"wrote {png}"
