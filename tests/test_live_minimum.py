"""benchmarks/live_minimum.py: the smallest budget a live training run completes at, per policy,
beside its replay's; and the comparison of two builds' results (table and figure)."""
import json

from _scripts import load_benchmark

live_minimum = load_benchmark("live_minimum")


def test_the_ratios_fall_by_the_step_down_to_the_lowest():
    assert live_minimum.ratios("0.6:0.5:0.05") == [0.6, 0.55, 0.5]
    assert live_minimum.ratios("0.3:0.3:0.1") == [0.3]


def test_a_short_gpt_run_finds_its_minimum_live_and_replayed(tmp_path, capsys):
    out = tmp_path / "out"
    assert live_minimum.main(["--steps", "1", "--ratios", "0.9:0.7:0.1", "--out", str(out),
                              "--label", "t", "--replay", "--no-progress"]) == 0
    result = json.loads((out / "live_minimum_gpt_t.json").read_text())
    assert result["example"] == "gpt" and result["steps"] == 1 and result["peak"] > 0
    for policy in ("coop", "coop-offload"):
        rows = result["policies"][policy]
        assert [r["ratio"] for r in rows] == [0.9, 0.8, 0.7]
        assert all(r["status"] == "ok" and r["bit_identical"] and r["overhead"] >= 1.0
                   for r in rows)
        assert result["minimum"][policy] == 0.7 and result["replay_minimum"][policy] == 0.7
    text = capsys.readouterr().out
    assert "| coop | 0.70 (" in text and "replays down to 0.7 under coop" in text

    # two results side by side, and drawn
    other = dict(result, label="u", peak=result["peak"] * 2,
                 minimum={"coop": 0.8, "coop-offload": None})
    (out / "u.json").write_text(json.dumps(other))
    png = tmp_path / "cmp.png"
    assert live_minimum.main(["--compare", str(out / "live_minimum_gpt_t.json"),
                              str(out / "u.json"), "--png", str(png)]) == 0
    lines = capsys.readouterr().out.splitlines()
    mib = result["peak"] / 2**20
    assert f"| coop | 0.70 ({0.7 * mib:.2f} MiB) | 0.80 ({0.8 * 2 * mib:.2f} MiB) |" in lines
    assert f"| coop-offload | 0.70 ({0.7 * mib:.2f} MiB) | - |" in lines
    assert png.stat().st_size > 10_000
