"""Recording any time: a recording entered after tensors exist starts with them (the held
resident ones as constants at the run's offsets, the held evicted ones as calls with no
inputs), so the trace replays, and a recording of the second half of a training run replays
with the evictions and recomputes the run made in that half."""
import json

import numpy as np
import pytest
from _gradcheck import deep_mlp, deep_mlp_loss

import coop
import coop.trace.replay as R
from coop import ops
from coop.trace._replay import Replayer
from coop.models import GPT
from coop.optim import AdamW
from coop.trace import load

COUNTERS = ("recomputes", "evictions", "eager_evictions", "searches", "ops")


def mlp(rt):
    x, targets, params = deep_mlp(rt, depth=24, width=16, batch=128)
    opt = AdamW(params, lr=1e-2)

    def step():
        loss = deep_mlp_loss(x, targets, params)
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    return step


def gpt(rt):
    model = GPT(rt, 32, 16, 2, 2, 16, rng=0)
    opt = AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)

    def step():
        idx = rng.integers(0, 32, (4, 16))
        loss = model.loss(idx, np.roll(idx, -1, axis=1))
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    return step


def train(budget, policy, model, path=None, steps=4):
    """Train steps steps; with a path, record the second half. Returns the runtime, its stats
    when the recording began, and the layout of its arena then."""
    rt = coop.Runtime(coop.numpy_allocator(budget), policy=policy, cost="cpu")
    step = model(rt)
    before = layout = None
    for k in range(steps):
        if k == steps // 2 and path is not None:
            before, layout = rt.stats(), rt.arena.pieces()
            with rt.record(path):
                for _ in range(steps - k):
                    step()
            break
        step()
    return rt, before, layout


@pytest.mark.parametrize("model", [mlp, gpt])
def test_the_second_half_of_a_training_run_replays_with_its_decisions(model, tmp_path):
    peak = train("64MiB", "coop", model)[0].stats()["peak_used_bytes"]
    compared = 0
    for policy in ("coop", "dtr", "lru"):
        for ratio in (0.9, 0.6):
            path = tmp_path / f"{policy}-{ratio}.jsonl"
            try:
                rt, before, layout = train(int(ratio * peak), policy, model, path)
            except coop.OutOfMemoryError:
                continue
            after = rt.stats()
            result = R.replay(path, budget=rt.arena.capacity, policy=policy, thrash=None)
            assert result["status"] == "ok", (policy, ratio)
            assert {k: result[k] for k in COUNTERS} == \
                {k: after[k] - before[k] for k in COUNTERS}, (policy, ratio)
            assert result["cost_total"] == pytest.approx(after["cost_total"] - before["cost_total"],
                                                         rel=1e-12)
            compared += after["evictions"] > before["evictions"]
            starts_with_the_runs_layout(path, rt, layout)
    assert compared >= 3


def starts_with_the_runs_layout(path, rt, layout):
    """Replaying the records written on entering places every held storage at its offset in
    the run; the ranges between them are free. Returns whether there were such ranges."""
    while layout[-1][2]:
        layout = layout[:-1]
    gaps = sum(free for _, _, free, _ in layout)   # a free piece is never next to another
    arena = coop.Arena(rt.arena.capacity, rt.arena.alignment)
    # a constant per piece, then a release per free range (the meta record is not compiled)
    Replayer(load(path), arena, rt.policy).run(0, len(layout) + gaps)
    arena.check()
    pieces = [(o, s, free) for o, s, free, _ in arena.pieces()]
    assert pieces[:len(layout)] == [(o, s, free) for o, s, free, _ in layout]
    end = layout[-1][0] + layout[-1][1]
    assert pieces[len(layout):] in ([], [(end, rt.arena.capacity - end, True)])
    return gaps > 0


def test_a_recording_entered_later_defines_every_id_it_reads(tmp_path):
    """Without the live storages first, the trace read ids it never defined."""
    rt = coop.Runtime(coop.numpy_allocator("1MiB"), cost="cpu")
    x = rt.tensor(np.arange(64.0))
    y = ops.exp(x)
    z = ops.mul(y, y)
    rt.evict(z)
    layout = rt.arena.pieces()
    path = tmp_path / "late.jsonl"
    with rt.record(path):
        w = ops.add(y, z)                     # z comes back by a recompute in the run
        del w
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # x, the free range between x and y (cheap: at the high end), y; z
    assert [r["op"] for r in records] == ["meta", "constant", "constant", "constant", "release",
                                          "call", "call", "release"]
    assert records[5]["inputs"] == [] and records[5]["name"] == "evicted before recording"
    assert starts_with_the_runs_layout(path, rt, layout)
    result = R.replay(path, budget="1MiB", policy="coop")
    assert (result["status"], result["ops"]) == ("ok", 2)


def test_recording_from_the_start_writes_no_prologue(tmp_path, rt):
    path = tmp_path / "fresh.jsonl"
    with rt.record(path):
        rt.tensor(np.ones(4))
    assert [json.loads(line)["op"] for line in path.read_text().splitlines()] == \
        ["meta", "constant", "release"]
