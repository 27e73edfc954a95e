"""benchmarks/tier_phases.py: a replay's cost, exposed copy time and copies split by phase."""
import json

import pytest
from _scripts import load_benchmark

import coop.trace.replay as R
from coop.cli.main import main as coop_main
from coop.optim import UPDATE_KERNELS

tier_phases = load_benchmark("tier_phases")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "sweep"
    assert coop_main(["bench", "--quick", "--models", "gpt2", "--policies", "coop-offload",
                      "--step", "0.5", "--jobs", "1", "--no-progress", "--out", str(out)]) == 0
    (path,) = (out / "traces").glob("gpt2-*.jsonl")
    return path


def _ops(path):
    with open(path) as f:
        return [r["name"] for r in map(json.loads, f) if r["op"] in ("call", "mutate")]


def test_the_phases_add_up_to_the_replay_and_split_the_step_by_its_ops(trace, capsys):
    """Below the recompute-only bound (the tier open): the three phases' records, cost,
    exposed copy time and bytes each way add up to the replay's own figures at the same
    budget; the update's ops are the optimizer's, the forward pass has no backward kernel."""
    base = R.unlimited(trace)
    ratio = 0.8 * base["lower_bound_bytes"] / base["peak_bytes"]
    status, overhead, rows = tier_phases.phases(trace, ratio=ratio)
    r = R.replay(trace, ratio=ratio, policy="coop-offload", thrash=None,
                 peak_bytes=base["peak_bytes"])
    assert status == r["status"] == "ok" and overhead == pytest.approx(r["compute_overhead"])
    total = {k: sum(rows[p][k] for p in tier_phases.PHASES) for k in rows["forward"]}
    assert total["records"] == r["records"]
    assert total["cost"] == pytest.approx(r["cost_total"], rel=1e-12)
    assert total["exposed"] == pytest.approx(r["copy_exposed"], rel=1e-12) and total["exposed"] > 0
    assert (total["bytes_d2h"], total["bytes_h2d"]) == (r["bytes_d2h"], r["bytes_h2d"])
    names = _ops(trace)
    first_backward = next(i for i, n in enumerate(names) if n.endswith("_backward"))
    update = sum(n in UPDATE_KERNELS for n in names)
    assert update > 0 and rows["update"]["ops"] == update
    assert rows["forward"]["ops"] == first_backward
    assert rows["backward"]["ops"] == len(names) - first_backward - update
    tier_phases.main([str(trace), "--budget", f"{ratio:.6f}"])
    text = capsys.readouterr().out.splitlines()
    assert text[0].endswith(f"under coop-offload: ok, compute overhead {overhead:.3f}")
    assert [line.split(" | ")[0] for line in text[3:]] == ["| forward", "| backward", "| update",
                                                           "| step"]
