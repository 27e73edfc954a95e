"""benchmarks/oom_walls.py: what stopped a sweep's failed replays (rows made up here, so each
count is known; tests/test_replay.py checks the replay's figures it reads)."""
import json

import pytest
from _scripts import load_benchmark

from coop.errors import OutOfMemoryError

oom_walls = load_benchmark("oom_walls")


def row(model, policy, request, budget, pinned, walls, window, constants, evictable,
        status="oom", depth=None, frames=None):
    err = OutOfMemoryError("", request, budget, 0, 0, pinned, walls, window, constants,
                           evictable)
    return {"model": model, "policy": policy, "status": status, "budget_bytes": budget,
            "failed_request": request, "failed_pinned": pinned, "failed_walls": walls,
            "failed_window": window, "failed_constants": constants,
            "failed_evictable": evictable, "failed_bytes_fit": err.bytes_fit,
            "failed_recompute_depth": depth, "failed_recompute_planned": depth,
            "failed_recompute_pinned": frames}


def test_the_counts_of_made_up_failures(tmp_path, capsys):
    rows = [
        # the bytes fit (30 + 10 + 20 + 30 <= 100) and a 40-byte range holds the 30-byte request;
        # inside a rematerialization 3 deep, whose pending ops' inputs are 15 of the 30 pinned
        row("a", "coop", 30, 100, 30, 10, 40, 20, 5, depth=3, frames=15),
        # the bytes do not fit (60 + 0 + 20 + 30 > 100); the range holds it; nothing evictable;
        # inside one whose pending inputs are all 60
        row("a", "coop", 30, 100, 60, 0, 35, 20, 0, depth=1, frames=60),
        # the bytes fit, no range holds it
        row("b", "coop", 30, 100, 10, 0, 20, 10, 1),
        # not counted: another policy, a run that completed, a sweep without the figures
        row("b", "dtr", 30, 100, 10, 0, 20, 10, 1),
        row("b", "coop", 30, 100, 10, 0, 20, 10, 1, status="ok"),
        {**row("b", "coop", 30, 100, 10, 0, 20, 10, 1), "failed_bytes_fit": None},
    ]
    (tmp_path / "runs.json").write_text(json.dumps(rows))
    oom_walls.main([str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == ["| a | 2 | 1 | 2 | 1 | 1 | 2 | 0.75 |",
                         "| b | 1 | 1 | 0 | 0 | 1 | 0 | - |",
                         "| all | 3 | 2 | 2 | 1 | 2 | 2 | 0.75 |"]


def test_a_folder_without_failures_or_runs_is_an_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        oom_walls.main([str(tmp_path)])
    assert "no runs.json" in capsys.readouterr().err
    (tmp_path / "runs.json").write_text(json.dumps([row("a", "coop", 1, 2, 0, 0, 2, 0, 0, "ok")]))
    with pytest.raises(SystemExit, match="no replay of coop ran out of memory"):
        oom_walls.main([str(tmp_path)])
