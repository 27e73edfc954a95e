"""coop's in-place rule against DTR's (coop-no-inplace), on the unrolled-GAN-like program
(coop.models.unrolled): in-place updates inside an unrolled loop whose activations an outer
backward reads. The engine's branches are counted exactly in tests/test_engine.py."""
import numpy as np
import pytest

import coop
import coop.trace.replay as R
from coop._core import CHEAP
from coop.engine import Engine, SizeExecutor
from coop.models.unrolled import unrolled_gan_trace

from _graphs import ADDC, MUL, TANH, evict

KIB = 1024
RATIOS = [r / 100 for r in range(100, 29, -5)]


def _gan(tmp_path, unroll, layers, width, batch):
    return R.load(unrolled_gan_trace(tmp_path / f"gan-{unroll}-{layers}-{width}-{batch}.jsonl",
                                     unroll=unroll, layers=layers, width=width, batch=batch))


@pytest.fixture(scope="module")
def gan(tmp_path_factory):
    return R.load(unrolled_gan_trace(tmp_path_factory.mktemp("gan") / "gan.jsonl", unroll=4,
                                     layers=3, width=256, batch=64))


def test_the_program_mutates_inside_its_unrolled_loop(gan):
    names = [gan.names[t] for t in range(gan.n_ops)]
    assert names.count("mul_") == names.count("add_") - 1 == 4 * 3


def test_coop_is_never_worse_than_dtrs_rule_on_the_unrolled_gan(gan):
    peak = R.peak(gan)
    done = {}
    for policy in ("coop", "coop-no-inplace"):
        for ratio in RATIOS:
            result = R.replay(gan, budget=int(ratio * peak), policy=policy)
            if result["status"] == "ok":
                done[policy, ratio] = result["compute_overhead"]
    both = [r for r in RATIOS if ("coop", r) in done and ("coop-no-inplace", r) in done]
    assert len(both) >= 2 and any(done["coop-no-inplace", r] > 1.0 for r in both)
    for ratio in both:
        assert done["coop", ratio] <= done["coop-no-inplace", ratio], ratio
    assert min(r for p, r in done if p == "coop") <= min(r for p, r in done
                                                         if p == "coop-no-inplace")


def _overwrite_a_released_value(policy):
    """a = f(c) (cost 10), released; x = g(a) (cost 20); then x.op_() in place (cost 5), with
    no pending reader of x: coop overwrites x, DTR's rule copies its old value and releases
    the copy. Returns the engine, arena, x and x's old value."""
    arena = coop.Arena(16 * KIB, 512)
    e = Engine(arena, policy, SizeExecutor(), 0.0)
    c = e.constant(KIB)
    e.retain(c)
    outputs = []
    for inputs, cost in (([c], 10.0), (None, 20.0)):
        o = e.begin(inputs or [outputs[-1]], CHEAP)
        (s,) = e.finish_call(o, cost, [(KIB, -1)])
        e.retain(s)
        outputs.append(s)
    a, x = outputs
    e.unref(a)
    o = e.begin([x], CHEAP)
    e.prepare_inplace(o, [0])
    e.finish_inplace(o, 5.0)
    (old,) = e.inputs(o)
    arena.check()
    return e, arena, x, old


def test_an_overwritten_old_value_counts_in_its_neighbors_cost_as_a_released_version_does():
    # either rule leaves the old value evicted, in a's evicted class (10 + 20): x's c' is its
    # cost 5 + 30 under both (coop's once left it out: 5, so x looked cheap to evict)
    seen = {}
    for policy in ("coop", "coop-no-inplace"):
        e, arena, x, old = _overwrite_a_released_value(policy)
        assert not e.resident(old) and e.resident(x)
        seen[policy] = (e.copies, arena.storage_info(old)["class_cost"],
                        arena.storage_info(x)["cprime"])
    assert seen == {"coop": (0, 30.0, 35.0), "coop-no-inplace": (1, 30.0, 35.0)}


def test_a_live_in_place_overwrite_weighs_and_recomputes_as_dtrs_rule_does(make_rt):
    # the same on the host backend: x's c' equal under both rules, and every value bit-identical
    # after evicting everything
    scale_ = coop.Kernel(lambda a, c: np.multiply(a, c, out=a), name="mul_", inplace=0)
    seen = {}
    for policy in ("coop", "coop-no-inplace"):
        rt = make_rt(policy=policy)
        c = rt.tensor(np.linspace(-1.0, 1.0, 64))
        a = rt.apply(TANH, c)
        x = rt.apply(ADDC, a, c=0.25)
        y = rt.apply(MUL, x, x)          # a pending reader of x's old value
        del a
        rt.apply(scale_, x, c=1.0 / 3.0)
        rt.apply(scale_, x, c=3.0)        # its old value has no pending reader: overwritten
        cprime = rt.arena.storage_info(x.storage.sid)["cprime"]
        evict(rt, x, y)
        seen[policy] = (cprime, x.numpy().tobytes(), y.numpy().tobytes())
        rt.arena.check()
    assert seen["coop"] == seen["coop-no-inplace"]
    expect = np.tanh(np.linspace(-1.0, 1.0, 64)) + 0.25
    assert seen["coop"][2] == (expect * expect).tobytes()


def test_coop_completes_the_default_unrolled_gan_where_dtrs_rule_does(tmp_path):
    # benchmarks/bench_inplace.py's program from 1.0 of its peak down to 0.80: coop once
    # evicted a weight whose c' left out its overwritten old values and thrashed recomputing
    # their chain where DTR's rule completed (0.84 then)
    gan = _gan(tmp_path, 5, 3, 512, 64)
    peak = R.peak(gan)
    completed = 0
    for ratio in [r / 100 for r in range(100, 79, -2)]:
        budget = int(ratio * peak)
        ours, dtrs = (R.replay(gan, budget=budget, policy=p) for p in ("coop", "coop-no-inplace"))
        if dtrs["status"] == "ok":
            completed += 1
            assert ours["status"] == "ok", ratio
            assert ours["compute_overhead"] <= dtrs["compute_overhead"], ratio
            assert ours["peak_used_bytes"] <= budget
    # all but 0.84 and below (both fail there); 0.90 thrashed under both while a released
    # dependency recomputed once was evicted as soon as its reader had run
    assert completed == 8


@pytest.mark.parametrize("shape", [(4, 3, 256, 64), (3, 2, 512, 64), (10, 2, 256, 32)])
def test_coop_is_never_worse_than_dtrs_rule_at_any_ratio(tmp_path, shape):
    # every ratio from 1.00 down to 0.70 in steps of 0.01: where DTR's rule completes, coop
    # completes with an overhead no higher; and coop's minimum ratio is no higher
    gan = _gan(tmp_path, *shape)
    peak = R.peak(gan)
    ratios = [r / 100 for r in range(100, 69, -1)]
    ours, dtrs = ([R.replay(gan, budget=int(r * peak), policy=p) for r in ratios]
                  for p in ("coop", "coop-no-inplace"))
    worse = [r for r, a, b in zip(ratios, ours, dtrs) if b["status"] == "ok" and (
        a["status"] != "ok" or a["compute_overhead"] > b["compute_overhead"])]
    assert worse == []
    assert min(r for r, a in zip(ratios, ours) if a["status"] == "ok") <= \
        min(r for r, b in zip(ratios, dtrs) if b["status"] == "ok")
