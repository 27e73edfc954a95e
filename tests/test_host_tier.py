"""The host tier (policy coop-offload): a piece leaves its window by eviction, a move or an
offload to host memory, and comes back by a copy, on demand or prefetched. Replays of hand-
written traces give hand-computed counters; the tier never changes a run that completes
without it; a full tier refuses a constant with nothing lost; bad arguments name the fix."""
import json
from unittest.mock import ANY

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from _arena import SEARCH_TIMES
from _gradcheck import deep_mlp, deep_mlp_loss
from _late_copies import LateCopies
from _training import step
from _traces import TRACE, call, write_trace

import coop
import coop.trace.replay as R
from coop.models import GPT
from coop.optim import AdamW
from coop._core import CHEAP, Arena
from coop.backends._host import HostBackend
from coop.engine import Engine, SizeExecutor
from coop.cli.replay import failure
from coop.backends.base import AHEAD_CHUNK
from coop.engine.cost import DEVICES
from coop.trace._replay import Replayer

A100 = DEVICES["a100-80gb"]
D2H, H2D = A100.d2h_ns_per_byte, A100.h2d_ns_per_byte    # 0.04 ns per byte each way


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.jsonl", TRACE)


def tier(result):
    return {k: result[k] for k in ("offloads", "fetches", "prefetches", "bytes_d2h",
                                   "bytes_h2d", "host_peak_bytes", "host_drops",
                                   "host_refusals")}


def test_without_the_tier_the_constant_is_a_wall(trace):
    for policy in ("coop", "coop-no-move", "dtr"):
        assert R.replay(trace, budget=6144, policy=policy)["status"] == "oom"


def test_the_constant_leaves_twice_and_comes_back_once_on_demand(trace):
    """Without lookahead: w is copied out at g (exposed: the range is reused at once), copied
    back on demand at h (exposed), and leaves again at k with nothing copied: its host copy,
    kept since it came back, still holds its bytes."""
    r = R.replay(trace, budget=6144, policy="coop-offload", lookahead=0, check=True)
    assert r["status"] == "ok"
    assert tier(r) == {"offloads": 2, "fetches": 1, "prefetches": 0, "bytes_d2h": 2048,
                       "bytes_h2d": 2048, "host_peak_bytes": 2048, "host_drops": 0,
                       "host_refusals": 0}
    assert (r["evictions"], r["recomputes"]) == (0, 0)
    assert r["copy_exposed"] == pytest.approx(2048 * D2H + 2048 * H2D)
    assert r["copy_hidden"] == 0.0
    # the ops' cost, the exposed copies and the window's moves (room made by moving b)
    assert r["cost_total"] == pytest.approx(6e4 + 2048 * (D2H + H2D) + r["move_cost"])


def test_a_prefetch_hides_the_copy_back_under_compute(trace):
    """With lookahead 2, after m1 the replay sees h read w: w fits the free range, so its
    copy back starts then and runs under m2 (1e4 ns): h waits for nothing."""
    r = R.replay(trace, budget=6144, policy="coop-offload", lookahead=2, check=True)
    assert r["status"] == "ok"
    assert (r["offloads"], r["fetches"], r["prefetches"], r["bytes_h2d"]) == (2, 0, 1, 2048)
    assert r["copy_exposed"] == pytest.approx(2048 * D2H)
    assert r["copy_hidden"] == pytest.approx(2048 * H2D)
    assert r["cost_total"] == pytest.approx(6e4 + 2048 * D2H + r["move_cost"])


#: TRACE with p: after m1, p's output (1536 bytes, held to the end, never read) leaves w's
#: copy back no free range of 2048 bytes when h, the op after next, is in sight
ROOM = TRACE[:6] + [call("p", [3], 8, 1536)] + TRACE[6:] + [{"op": "release", "id": 8}]


def test_room_is_made_for_the_op_after_next_so_its_copy_back_runs_under_the_next(tmp_path):
    """After p, h (the op after next) reads w, in the tier, and no free range holds it: with
    a lookahead of 2 the window makes room for it then (p's output, which neither m2 nor h
    reads, is offloaded: its copy out is exposed), m2's input and h's resident input pinned,
    so w's copy back runs under m2 (1e4 ns) and h waits for nothing. With a lookahead of 1
    the same room is made at h, on demand, and the copy back is exposed."""
    path = write_trace(tmp_path / "room.jsonl", ROOM)
    got = {}
    for k in (1, 2):
        r = R.replay(path, budget=6144, policy="coop-offload", lookahead=k, check=True,
                     lower_bound_bytes=0)
        assert r["status"] == "ok"
        assert (r["offloads"], r["evictions"], r["recomputes"]) == (3, 0, 0)
        assert (r["bytes_d2h"], r["bytes_h2d"]) == (2048 + 1536, 2048)
        got[k] = r
    assert (got[1]["fetches"], got[1]["prefetches"]) == (1, 0)
    assert got[1]["copy_exposed"] == pytest.approx(3584 * D2H + 2048 * H2D)
    assert got[1]["copy_hidden"] == 0.0
    assert (got[2]["fetches"], got[2]["prefetches"]) == (0, 1)
    assert got[2]["copy_exposed"] == pytest.approx(3584 * D2H)
    assert got[2]["copy_hidden"] == pytest.approx(2048 * H2D)
    assert got[1]["cost_total"] - got[2]["cost_total"] == pytest.approx(2048 * H2D)


def test_a_full_host_tier_refuses_the_constant_and_loses_nothing(trace):
    """A tier of 1024 bytes cannot take w: it is refused (it stays, a wall again) and the
    run fails as it does without the tier, every invariant holding."""
    r = R.replay(trace, budget=6144, policy="coop-offload", host_budget=1024, check=True)
    assert r["status"] == "oom"
    assert (r["offloads"], r["host_refusals"], r["host_peak_bytes"]) == (0, 1, 0)
    assert failure(r, 9).endswith(
        "; the host tier was full and refused 1 constant (raise --host-budget))")
    r["host_refusals"] = 3
    assert failure(r, 9).endswith("refused 3 constants (raise --host-budget))")
    r = R.replay(trace, budget=6144, policy="coop-offload", host_budget="2KiB", check=True)
    assert (r["status"], r["offloads"], r["host_peak_bytes"]) == ("ok", 2, 2048)


def test_the_device_names_the_link(trace):
    h200 = DEVICES["h200"]
    r = R.replay(trace, budget=6144, policy="coop-offload", lookahead=0, device="h200")
    assert r["copy_exposed"] == pytest.approx(2048 * (h200.d2h_ns_per_byte
                                                      + h200.h2d_ns_per_byte))
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        R.replay(trace, budget=6144, policy="coop-offload", device="tpu")


def test_a_mutated_constant_copies_out_again(tmp_path):
    """w leaves for g (the tier's first use: from then on every choice counts offloads), comes
    back for u, and leaves again for k, whose input b must come back. Read by u, w's host copy
    still holds its bytes, so its second offload copies nothing: out go w, then x and b (for u
    and its output), 6144 bytes; back come w and b. Mutated by u (no output: only x leaves for
    it), w's copy is dropped and its second offload copies it out again: w, x, w, 5120 bytes."""
    def trace(*u):
        return write_trace(tmp_path / "u.jsonl", [
            {"op": "meta", "alignment": 512},
            {"op": "constant", "id": 0, "size": 2048},       # w
            {"op": "constant", "id": 1, "size": 1024},       # x
            call("g", [1], 2, 3072),                          # b: w must leave
            *u,                                               # w back
            call("k", [2], 4, 1024),                          # w leaves again
        ])
    # lower_bound_bytes=0: the tier opens at its first use, as in a live run's first step
    read = R.replay(trace(call("u", [0], 3, 0), {"op": "release", "id": 3}), budget=5120,
                    policy="coop-offload", lookahead=0, check=True, lower_bound_bytes=0)
    mutated = R.replay(trace({"op": "mutate", "name": "u", "inputs": [0], "mutated": [0],
                              "outputs": [], "cost": 1e4}),
                       budget=5120, policy="coop-offload", lookahead=0, check=True,
                       lower_bound_bytes=0)
    for r, expected in ((read, (4, 2, 6144, 5120)), (mutated, (3, 1, 5120, 2048))):
        assert r["status"] == "ok"
        assert (r["offloads"], r["fetches"], r["bytes_d2h"], r["bytes_h2d"]) == expected
        assert (r["evictions"], r["recomputes"]) == (0, 0)


def test_the_tier_changes_nothing_where_a_run_completes_without_it(trace):
    """Offloads come last (Arena.offload_last): at a budget where coop completes, coop-offload
    makes the same choices, to the last counter."""
    for budget in (8192, 7168):
        a = R.replay(trace, budget=budget, policy="coop")
        b = R.replay(trace, budget=budget, policy="coop-offload")
        assert a["status"] == b["status"] == "ok"
        for key in a:
            if key not in ("policy", "wall_time", "records_per_s", *SEARCH_TIMES):
                assert a[key] == b[key], key
        assert b["offloads"] == 0


def test_host_tier_arguments_name_the_fix():
    arena = Arena(4096, 512)
    with pytest.raises(ValueError, match="policy 'coop' has no host tier.*coop-offload"):
        Engine(arena, "coop", SizeExecutor(), host_budget=1024)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="host_budget must be a number of bytes"):
            Engine(Arena(4096, 512), "coop-offload", SizeExecutor(), host_budget=bad)
    with pytest.raises(ValueError, match="the h2d cost per byte"):
        Engine(Arena(4096, 512), "coop-offload", SizeExecutor(), link=(0.1, -1.0))
    with pytest.raises(ValueError, match="lookahead must be"):
        Engine(Arena(4096, 512), "coop-offload", SizeExecutor(), lookahead=-2)
    e = Engine(Arena(4096, 512), "coop-offload", SizeExecutor())
    assert e.offloading and e.host_budget == -1
    assert Engine(Arena(4096, 512), "coop", SizeExecutor()).offloading is False


def test_a_backends_host_budget_goes_to_an_offloading_runtime_and_is_refused_by_another():
    backend = coop.numpy_allocator("64KiB", host_budget="2KiB")
    assert backend.host_budget == 2048
    assert coop.Runtime(backend, policy="coop-offload")._engine.host_budget == 2048
    # the runtime's own host_budget wins over the backend's
    rt = coop.Runtime(coop.numpy_allocator("64KiB", host_budget="2KiB"), policy="coop-offload",
                      host_budget=4096)
    assert rt._engine.host_budget == 4096
    with pytest.raises(ValueError, match=r"this backend has a host_budget \(2,048 bytes\), but "
                                         r"policy 'coop' has no host tier, so it would go unused: "
                                         r"use an offloading policy \(policy='coop-offload'\), "
                                         r"or make the backend without host_budget"):
        coop.Runtime(backend, policy="coop")
    assert coop.Runtime(coop.numpy_allocator("64KiB"), policy="coop")._engine.host_budget == -1
    for bad, problem in (("-1GB", "must be more than 0"), ("lots", "not a budget"),
                         (1.5, "neither an int nor a string")):
        with pytest.raises((ValueError, TypeError), match=f"host_budget {bad!r}: {problem}"):
            coop.numpy_allocator("64KiB", host_budget=bad)
        with pytest.raises((ValueError, TypeError), match=f"host_budget {bad!r}: {problem}"):
            coop.Runtime(coop.numpy_allocator("64KiB"), policy="coop-offload", host_budget=bad)


# ---- host training with the tier: real copies, bit-identical results ---------------------------

def train_wide(rt, steps=3, read=True):
    """AdamW steps of a wide, shallow MLP: its constants (parameters, two moments each, the
    inputs) dominate its activations, so its budget floor is the constants; returns copies of
    the parameters and the losses."""
    x, targets, params = deep_mlp(rt, depth=6, width=96, batch=8)
    opt = AdamW(params, lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = deep_mlp_loss(x, targets, params)
        losses.append(float(loss.numpy()))
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    if not read:      # the parameters stay where they are (on the host tier, some of them)
        return None, losses
    return [np.array(p.numpy(), copy=True) for p in params], losses


def below_the_bound(train):
    """A budget 0.8 x the lower bound of train's unlimited run (no policy without the tier
    completes there), and the unlimited run's results."""
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="cpu")
    results = train(rt)
    return int(0.8 * rt.stats()["lower_bound_bytes"]), rt.stats(), results


def test_a_write_through_borrow_survives_an_offload_and_a_fetch():
    """A constant copied out ahead (its host copy cached), then written in place through
    borrow (as data parallel training's buckets are): the cached copy no longer holds its
    bytes, so it is dropped when the block ends; pushed out under pressure and read again, the
    constant holds what was written (a stale cached copy brought back held the old bytes)."""
    rt = coop.Runtime(coop.numpy_allocator("1MiB"), cost="cpu", policy="coop-offload")
    c = rt.tensor(np.ones(16384, np.float32))                  # 64 KiB
    twice = coop.Kernel(lambda a: a * 2, name="twice")
    outs = [twice(c) for _ in range(40)]                       # pressure: c is copied ahead
    sid = c.storage.sid
    assert rt._engine.info(sid)["on_host"] == 2
    with c.borrow() as a:
        a += 1.0
        del a
    assert rt._engine.info(sid)["on_host"] == 0               # the stale copy is gone
    del outs
    with c._borrow(False) as a:                                # a read keeps a cached copy
        assert a[0] == 2.0
        del a
    held = [rt.tensor(np.zeros(16384, np.float32)) for _ in range(60)]   # pushes c out
    assert rt.stats()["offloads"] > 0
    assert float(twice(c).numpy()[0]) == 4.0
    rt.arena.check()
    del held


def test_host_training_below_the_floor_is_bit_identical_with_the_tier():
    """Under a budget where coop runs out of memory (the constants do not fit beside the
    largest op), coop-offload trains: its arrays really go to host memory outside the arena and
    back (counted by the backend), and the losses and parameters equal the unlimited run's bit
    for bit. A host tier too small for the constants fails as coop does, with nothing lost."""
    budget, stats, (reference, ref_losses) = below_the_bound(train_wide)
    peak = stats["peak_used_bytes"]
    with pytest.raises(coop.OutOfMemoryError):
        train_wide(coop.Runtime(coop.numpy_allocator(budget), policy="coop", cost="cpu"))
    backend = coop.numpy_allocator(budget)
    rt = coop.Runtime(backend, policy="coop-offload", cost="cpu")
    got, losses = train_wide(rt)
    assert losses == ref_losses
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    s = rt.stats()
    assert s["offloads"] > 0 and s["bytes_d2h"] > 0 and s["fetches"] > 0
    copies_out, bytes_out, copies_back, bytes_back = backend.host_copies
    # every copy out and back is a real one, of the bytes the engine counts (a cached copy's
    # second offload copies nothing)
    assert bytes_out == s["bytes_d2h"] and bytes_back == s["bytes_h2d"] and copies_back == \
        s["fetches"] + s["prefetches"]
    assert s["host_peak_bytes"] > 0 and s["peak_used_bytes"] <= budget < peak
    rt.arena.check()
    small = coop.Runtime(coop.numpy_allocator(budget, host_budget=4096), policy="coop-offload",
                         cost="cpu")
    with pytest.raises(coop.OutOfMemoryError, match=r"; the host tier holds [\d,]+ of its "
                       r"4,096 bytes and has refused \d+ constants?, which stays? \(raise "
                       r"host_budget\); raise the budget"):
        train_wide(small)
    assert small.stats()["host_refusals"] > 0
    small.arena.check()


class ScarceHost(HostBackend):
    """A host backend whose host has memory for `room` copies out, then none
    (HostMemoryError, as a CuPy host whose cudaHostAlloc fails)."""

    room = 0

    def to_host(self, array, ahead=False):
        if self.room <= 0:
            raise coop.HostMemoryError("coop: the host has no memory for this copy")
        self.room -= 1
        return super().to_host(array, ahead)


def test_a_host_out_of_memory_is_a_full_tier_and_loses_nothing():
    """The host runs out of memory for copies (HostMemoryError from the backend): the engine
    treats the tier as full. With one copy fewer than the run makes, it evicts recomputable
    storages instead and trains bit-identically; with none, it refuses the constants and fails
    as a full tier does, the error naming the host, the arena whole."""
    budget, _, (reference, ref_losses) = below_the_bound(train_wide)
    roomy = ScarceHost(budget)
    roomy.room = 10 ** 6
    train_wide(coop.Runtime(roomy, policy="coop-offload", cost="cpu"))
    needed = 10 ** 6 - roomy.room
    short = ScarceHost(budget)
    short.room = needed - 1
    rt = coop.Runtime(short, policy="coop-offload", cost="cpu")
    got, losses = train_wide(rt)
    assert losses == ref_losses and all(np.array_equal(a, b) for a, b in zip(got, reference))
    s = rt.stats()
    assert s["host_failures"] > 0 and s["host_refusals"] == 0 and short.room == 0
    rt.arena.check()
    none = ScarceHost(budget)
    rt = coop.Runtime(none, policy="coop-offload", cost="cpu")
    with pytest.raises(coop.OutOfMemoryError, match=r"; the host tier holds 0 bytes and has "
                       r"refused \d+ constants, which stay: the host had no memory for \d+ "
                       r"copies \(free host memory, or give the runtime a host_budget the host "
                       r"can pin\); raise the budget"):
        train_wide(rt)
    s = rt.stats()
    assert s["offloads"] == 0 and s["host_failures"] == s["host_refusals"] > 0
    rt.arena.check()


def train_gpt(rt, steps=3, in_backward=False, each=None):
    """AdamW steps of a small, wide GPT (parameters and moments dominate its activations);
    returns the losses and copies of the parameters. in_backward: each parameter updated inside
    the backward pass (Optimizer.backward_step); each(i, model): called after step i's forward
    pass."""
    model = GPT(rt, 32, 16, 2, 2, 128, rng=0)
    opt = AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        idx = rng.integers(0, 32, (2, 16))
        loss = model.loss(idx, np.roll(idx, -1, axis=1))
        if each is not None:
            each(len(losses), model)
        losses.append(float(loss.numpy()))
        step(opt, loss, in_backward)
        del loss
    return losses, [np.array(p.numpy(), copy=True) for p in model.parameters()]


def test_updates_inside_the_backward_pass_train_with_the_tier_bit_identically():
    """backward_step with the host tier, below the bound of the step that updates after the
    backward pass: the same losses and parameters, bit for bit, as that step unlimited, with
    arrays really offloaded; its own arena never holds more than the budget."""
    budget, _, (ref_losses, reference) = below_the_bound(train_gpt)
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop-offload", cost="cpu")
    losses, got = train_gpt(rt, in_backward=True)
    assert losses == ref_losses
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    s = rt.stats()
    assert s["offloads"] > 0 and s["bytes_d2h"] > 0 and s["peak_used_bytes"] <= budget
    rt.arena.check()


def test_a_gpt_trains_with_the_tier_where_coop_cannot_bit_identically():
    budget, _, (ref_losses, reference) = below_the_bound(train_gpt)
    with pytest.raises(coop.OutOfMemoryError):
        train_gpt(coop.Runtime(coop.numpy_allocator(budget), policy="coop", cost="cpu"))
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop-offload", cost="cpu")
    losses, got = train_gpt(rt)
    assert losses == ref_losses
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    assert rt.stats()["offloads"] > 0 and rt.stats()["bytes_d2h"] > 0
    rt.arena.check()


def test_a_recorded_run_with_the_tier_replays_with_its_counters(tmp_path):
    """The trace records the run's host link: its replay (without lookahead, as a live run
    has none) offloads, copies back and recomputes as the run did, at the same cost. (A trace
    has no record of the program reading a value, Tensor.numpy(): an offloaded parameter read
    after the step would be copied back in the run and not in the replay.)"""
    budget = below_the_bound(train_wide)[0]
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop-offload", cost="cpu")
    path = tmp_path / "run.jsonl"
    with rt.record(path):
        train_wide(rt, read=False)    # a trace records no reads of the parameters
    stats = rt.stats()
    assert stats["offloads"] > 0
    # as the run opened its tier: at its first blocked choice (lower_bound_bytes=0)
    result = R.replay(path, budget=budget, policy="coop-offload", thrash=None, lookahead=0,
                      lower_bound_bytes=0)
    assert result["status"] == "ok" and not result["tier_open_at_start"]
    for key in ("offloads", "fetches", "bytes_d2h", "bytes_h2d", "host_peak_bytes",
                "evictions", "recomputes", "searches", "peak_used_bytes"):
        assert result[key] == stats[key], key
    assert result["cost_total"] == pytest.approx(stats["cost_total"], rel=1e-12)


def test_the_tier_opens_for_good_the_first_time_it_is_needed(trace):
    """Offloads count only when no choice exists without them, until the first time: from then
    on (the budget is below what the device alone holds) every choice counts them."""
    program = R.load(trace)
    rp = Replayer(program, Arena(6144, 512), "coop-offload", 0.0, R.copy_cost(program), None,
                  R.host_link(program), 0)
    rp.run(0, 2)                                # w and f: nothing leaves
    assert rp.engine.arena.offload_last and rp.engine.offloads == 0
    rp.run(2, 3)                                # g: w must leave
    assert rp.engine.offloads == 1 and not rp.engine.arena.offload_last
    rp.run(3)
    rp.finish()
    rp.engine.arena.check()


def test_the_capuchin_style_baseline_offloads_from_the_first_eviction(trace):
    """capuchin: DTR's victims, each by its cheaper way, offloads counted from the start, and no
    addresses: for g it offloads w, but the range w frees is cut from the free end of the
    arena by a (g's input, pinned), so g's 3072 bytes still find no room; coop-offload moves a
    and completes."""
    r = R.replay(trace, budget=6144, policy="capuchin", lookahead=0, check=True)
    assert (r["status"], r["failed_request"], r["failed_largest_free"]) == ("oom", 3072, 2048)
    assert (r["offloads"], r["bytes_d2h"], r["recomputes"]) == (1, 2048, 0)
    assert R.replay(trace, budget=6144, policy="coop-offload")["status"] == "ok"
    program = R.load(trace)
    rp = Replayer(program, Arena(6144, 512), "capuchin", 0.0, R.copy_cost(program), None,
                  R.host_link(program), 0)
    assert not rp.engine.arena.offload_last     # open from the start


def test_the_timeline_draws_the_host_tier(trace, tmp_path):
    """The timeline's lane has a row of offloads and one of copies back, per record; w's piece
    ends "offloaded" at g, one begins "fetched" at h; the header counts them."""
    from coop.trace import timeline
    tl = timeline.write(trace, tmp_path / "t.html", budget=6144, policy="coop-offload")
    data = tl.data()
    sums = np.array([m[1:] for m in data["counts"]]).sum(axis=0).tolist()
    assert sums[3:] == [tl.figures["offloads"], tl.figures["copies_back"]] and sums[3] >= 2
    col = {c: k for k, c in enumerate(data["columns"])}
    ends = [timeline.MARKS[p[col["end"]]] for p in data["pieces"]]
    begins = [timeline.MARKS[p[col["begin"]]] for p in data["pieces"]]
    assert ends.count("offloaded") == tl.figures["offloads"]
    assert begins.count("fetched") == tl.figures["copies_back"]
    page = (tmp_path / "t.html").read_text()
    assert 'data-name="offloads"' in page and "copies back" in page


def test_a_live_run_prefetches_by_the_previous_steps_order():
    """With lookahead, after each op the constants the next ops of the previous step read
    (coop.optim marks the steps) start coming back when they fit: copies back turn into
    prefetches that run under compute, and the training stays bit-identical."""
    budget, _, (ref_losses, reference) = below_the_bound(lambda rt: train_gpt(rt, steps=4))
    plain = coop.Runtime(coop.numpy_allocator(budget), policy="coop-offload", cost="cpu")
    train_gpt(plain, steps=4)
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop-offload", cost="cpu",
                      lookahead=8)
    losses, got = train_gpt(rt, steps=4)
    assert losses == ref_losses
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    s, p = rt.stats(), plain.stats()
    assert p["prefetches"] == 0 and s["prefetches"] > 0 and s["copy_hidden"] > 0
    # the NumPy backend copies constants out ahead (its to_host is done when it returns)
    assert p["copies_ahead"] > 0 and s["copies_ahead"] > 0
    assert s["fetches"] < p["fetches"] and s["copy_exposed"] < p["copy_exposed"]
    rt.arena.check()



def test_a_prefetched_array_is_read_only_after_its_copy_is_awaited():
    """A live run with lookahead on a backend whose copies back ahead arrive only when
    awaited (LateCopies): every prefetch's reader (a kernel, a recompute, a move) waits for it
    first, and one dropped unread is never awaited (its late copy could land on a piece handed
    out again). The training equals the unlimited run's bit for bit."""
    budget, _, (ref_losses, reference) = below_the_bound(lambda rt: train_gpt(rt, steps=4))
    backend = LateCopies(budget, 64)
    rt = coop.Runtime(backend, policy="coop-offload", cost="cpu", lookahead=8)
    losses, got = train_gpt(rt, steps=4)
    assert losses == ref_losses
    for a, b in zip(got, reference):
        np.testing.assert_array_equal(a, b)
    s = rt.stats()
    assert s["prefetches"] > 0 and backend.landed > 0
    # each prefetch is awaited by its reader or left unread (dropped, or resident at the end)
    assert backend.landed + len(backend.late) <= s["prefetches"]
    rt.arena.check()


#: w (2048 bytes) is read by f; q needs room (the first eviction: f's output), r computes for
#: 1e4 ns with the device-to-host engine idle, then k's 3072 bytes need w's range
AHEAD = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 2048},
    call("f", [0], 1, 2048),
    call("p", [1], 2, 2048),
    call("q", [2], 3, 1024),
    call("r", [3], 4, 512),
    {"op": "release", "id": 4},
    call("k", [2, 3], 5, 3072),
]


def test_a_constant_is_copied_out_ahead_of_the_pressure(tmp_path):
    """Once q has had to make room, w (the stalest constant) is copied out while r computes:
    when k needs its range, w leaves with nothing left to copy, and only the other copies out
    (2 computed values, 5,120 bytes, made when their room was needed) and w's copy back are
    exposed. Without the tier the run fails. (lower_bound_bytes=0: the tier opens when q's
    choice needs it, as in a live run's first step.)"""
    path = write_trace(tmp_path / "ahead.jsonl", AHEAD)
    assert R.replay(path, budget=6144, policy="coop", lookahead=0)["status"] == "oom"
    r = R.replay(path, budget=6144, policy="coop-offload", lookahead=0, check=True,
                 lower_bound_bytes=0)
    assert not r["tier_open_at_start"]
    assert r["status"] == "ok"
    assert (r["copies_ahead"], r["offloads"], r["fetches"]) == (1, 3, 1)
    assert (r["bytes_d2h"], r["bytes_h2d"], r["host_peak_bytes"]) == (7168, 2048, 7168)
    assert r["copy_hidden"] == pytest.approx(2048 * D2H)
    assert r["copy_exposed"] == pytest.approx(5120 * D2H + 2048 * H2D)
    assert r["cost_total"] == pytest.approx(r["cost_first"] + 1e4 + r["copy_exposed"]
                                            + r["move_cost"])


#: c (512 bytes) is read by x's and y's producers; y (2048) is evicted for d, then released:
#: at the end c, x and y are held, 4,608 bytes, and y is evicted
END = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 512},
    call("x", [0], 1, 2048),
    call("y", [0], 2, 2048),
    call("d", [1], 3, 512),
    {"op": "release", "id": 3},
]


@pytest.mark.parametrize("budget", [3072, 4096])
def test_the_end_of_a_replay_sends_a_held_value_to_the_host_tier_to_remake_another(tmp_path,
                                                                                    budget):
    """The replay's end makes every held value resident, in order: c and x are, then y's
    recompute finds no room beside them. Without the tier that is the end (the budget holds
    less than the three). With it, x, made resident before and the largest, goes to the host
    tier, where it is safe, and y is recomputed (its copy out exposed: nothing runs after)."""
    path = write_trace(tmp_path / "end.jsonl", END)
    program = R.load(path)
    assert R.unlimited(program)["lower_bound_bytes"] == 3072
    assert R.replay(path, budget=budget, policy="coop", lookahead=0)["status"] == "oom"
    arena, rp, _ = R.make_replayer(program, budget, "coop-offload", 512, lookahead=0)
    rp.run(0)
    e = rp.engine
    c, x, y = (e.info(rp.storage_of(v)) for v in range(3))
    assert (c["offset"] is not None, x["offset"] is not None, y["offset"]) == (True, True, None)
    offloads = e.tier_counters()["offloads"]
    rp.finish()
    arena.check()
    c, x, y = (e.info(rp.storage_of(v)) for v in range(3))
    assert (x["offset"], x["on_host"]) == (None, 1)           # x went to the host tier
    assert y["offset"] is not None and c["offset"] is not None
    t = e.tier_counters()
    assert t["offloads"] == offloads + 1 and t["copy_exposed"] == pytest.approx(2048 * D2H)
    r = R.replay(path, budget=budget, policy="coop-offload", lookahead=0, check=True)
    assert (r["status"], r["offloads"], r["recomputes"]) == ("ok", offloads + 1, 2)


#: b (8192 bytes) and w and v (1024 each) are constants; g's room (at 12,288 bytes, the tier
#: open for constants from the start) sends v out, then b, the stalest left, is copied out
#: ahead; h reads b (so b cannot leave) and its room sends w out while b's copy still runs
CHUNKED = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 8192},
    {"op": "constant", "id": 1, "size": 1024},
    {"op": "constant", "id": 2, "size": 1024},
    call("f", [0, 1], 3, 1024),
    call("g", [3], 4, 2048),
    {"op": "release", "id": 3},
    call("h", [4, 0], 5, 2048),
    call("k", [5, 1, 2], 6, 512),
]


@pytest.mark.parametrize("chunk", [0, 512])
def test_a_copy_out_for_room_waits_for_a_copy_aheads_chunk_not_all_of_it(tmp_path, chunk):
    """A copy out ahead runs in chunks of Engine.ahead_chunk bytes: w's copy out for h's room
    waits for the chunk of b's copy ahead in flight (512 bytes), then its own 1024, where as
    one copy (ahead_chunk 0) it waited for all 8192 bytes of b's; the rest of b's copy goes on
    after w's, and everything else is the same. While b's copy out ahead runs, an offload of
    b is offered with what is left of it (its piece is reused only once it ends)."""
    program = R.load(write_trace(tmp_path / "chunked.jsonl", CHUNKED))
    assert R.unlimited(program)["lower_bound_bytes"] == 14336
    d2h, h2d = R.host_link(program)
    rp = Replayer(program, Arena(12288, 512), "coop-offload", 0.0, R.copy_cost(program), None,
                  (d2h, h2d), 0)
    e = rp.engine
    assert e.ahead_chunk == AHEAD_CHUNK == 4 << 20
    e.ahead_chunk = chunk
    assert e.open_tier(constants_only=True)
    rp.run(0, 5)                                       # up to g: v out, then b copied ahead
    t = e.tier_counters()
    assert (t["offloads"], t["copies_ahead"], t["bytes_d2h"]) == (1, 1, 1024 + 8192)
    assert t["copy_exposed"] == pytest.approx(1024 * d2h)
    # b's offer: its copy back, and what is left of its copy out ahead (all of it, just begun)
    b = e.info(rp.storage_of(0))
    assert b["on_host"] == 2 and b["offer"] == pytest.approx(8192 * (h2d + d2h))
    rp.run(5, 7)                                       # the release, h: w out for room
    assert rp.resident_values() == [0, 4, 5]
    after = e.tier_counters()
    assert after["offloads"] == 2 and after["bytes_d2h"] == 1024 + 8192 + 1024
    assert after["copy_exposed"] - t["copy_exposed"] == pytest.approx(
        ((512 if chunk else 8192) + 1024) * d2h)
    rp.run(7)
    rp.finish()
    e.arena.check()
    assert e.tier_counters()["copy_exposed"] == pytest.approx(
        (4608 if chunk else 12288) * d2h)


#: v (8192 bytes) starts in the host tier (the budget, 12,288 bytes, is below the bound: w and
#: v do not fit together); k reads it three ops after f, and its copy back (8192 x h2d = 328
#: ns) is longer than g's and h's compute (100 ns each)
FAR = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 8192},
    {"op": "constant", "id": 1, "size": 8192},
    call("f", [0], 2, 512, 100),
    call("g", [2], 3, 512, 100),
    call("h", [3], 4, 512, 100),
    call("k", [4, 1], 5, 512, 100),
]


@pytest.mark.parametrize("lookahead, exposed", [(2, 8192 * D2H + 8192 * H2D - 100),
                                                (3, 8192 * D2H + 8192 * H2D - 200)])
def test_room_is_made_now_for_a_later_input_whose_copy_back_cannot_hide_after_the_next_op(
        tmp_path, lookahead, exposed):
    """Room is made ahead for the op after next's inputs, and, while the copy engine back is
    idle, for a later op's input (within the lookahead) whose copy back would not end before
    that op if it started after the ops between: after f, v's copy back (328 ns) is longer
    than g and h (200 ns), so w goes out for it then (its copy out waited for) and v's copy
    runs under g and h; with a lookahead of 2 only the op after next is looked at, and v
    comes back after g, under h alone."""
    program = R.load(write_trace(tmp_path / "far.jsonl", FAR))
    assert R.unlimited(program)["lower_bound_bytes"] == 17408
    r = R.replay(program, budget=12288, policy="coop-offload", lookahead=lookahead,
                 thrash=None, check=True)
    assert (r["status"], r["tier_open_at_start"], r["constants_on_host"]) == ("ok", True, 1)
    assert (r["offloads"], r["prefetches"], r["fetches"]) == (1, 1, 0)
    assert (r["bytes_d2h"], r["bytes_h2d"]) == (8192, 8192)
    assert r["copy_exposed"] == pytest.approx(exposed)
    assert r["cost_total"] == pytest.approx(400 + exposed)


def test_below_the_bound_a_replay_opens_the_tier_at_the_start_for_constants(tmp_path):
    """AHEAD's recompute-only lower bound is 8192 bytes (w beside k's inputs and output): at
    6144 no policy without the tier completes, so the replay opens it at the start, for
    constants whose host copy is cached (leaving copies nothing). At q, w has no copy yet: the
    choice evicts f's output, as with the tier closed; w is copied out ahead while r computes;
    at k it leaves with nothing copied (offloads 1, still 2048 bytes out), and k's room is the
    first that w alone cannot make: the tier widens to every storage (Evictor.widen). At the
    end two computed values leave by offloads (5,120 bytes out in all). Opened at the first
    blocked choice instead (lower_bound_bytes=0, a live run's first step), the same trace
    evicts once and recomputes once, not twice: the rule is a gain measured over the paper
    models (docs/benchmarks.md), not on every trace."""
    path = write_trace(tmp_path / "ahead.jsonl", AHEAD)
    program = R.load(path)
    assert R.unlimited(program)["lower_bound_bytes"] == 8192
    rp = Replayer(program, Arena(6144, 512), "coop-offload", 0.0, R.copy_cost(program), None,
                  R.host_link(program), 0)
    e = rp.engine
    assert e.arena.offload_last and not e.tier_constants
    assert e.open_tier(constants_only=True)
    assert not e.arena.offload_last and e.tier_constants
    rp.run(0, 4)                                       # w, f, p, q
    t = e.tier_counters()
    assert (t["offloads"], t["copies_ahead"], t["bytes_d2h"]) == (0, 1, 2048)
    assert e.arena.stats()["evictions"] == 1 and e.tier_constants
    rp.run(4)                                          # r, the release, k
    t = e.tier_counters()
    assert (t["offloads"], t["bytes_d2h"], t["fetches"]) == (1, 2048, 0)
    assert not e.tier_constants
    rp.finish()
    e.arena.check()
    r = R.replay(path, budget=6144, policy="coop-offload", lookahead=0, check=True)
    assert (r["status"], r["tier_open_at_start"]) == ("ok", True)
    assert (r["offloads"], r["fetches"], r["bytes_d2h"], r["bytes_h2d"]) == (3, 1, 5120, 2048)
    assert (r["evictions"], r["recomputes"]) == (2, 2)
    # the bound given, as coop bench gives it, decides the same
    assert R.replay(program, budget=6144, policy="coop-offload", lookahead=0,
                    lower_bound_bytes=8192) == r | {"wall_time": ANY, "records_per_s": ANY,
                                                    **dict.fromkeys(SEARCH_TIMES, ANY)}
    late = R.replay(program, budget=6144, policy="coop-offload", lookahead=0,
                    lower_bound_bytes=0)
    assert (late["status"], late["tier_open_at_start"], late["bytes_d2h"]) == ("ok", False, 7168)
    assert (late["evictions"], late["recomputes"]) == (1, 1)
    # at the bound, or without a tier that opens late, nothing opens at the start
    assert not R.replay(program, budget=8192, policy="coop-offload")["tier_open_at_start"]
    assert not R.replay(program, budget=6144, policy="coop")["tier_open_at_start"]
    assert not R.replay(program, budget=6144, policy="capuchin")["tier_open_at_start"]


def test_open_tier_without_a_tier_changes_nothing(trace):
    program = R.load(trace)
    rp = Replayer(program, Arena(6144, 512), "coop", 0.0, R.copy_cost(program), None,
                  R.host_link(program), 0)
    assert not rp.engine.open_tier(constants_only=True)
    assert rp.engine.arena.offload_last and not rp.engine.tier_constants


def test_which_backends_copy_ahead():
    """CuPy's to_host(..., ahead=True) leaves the compute stream running and orders the piece's
    reuse after the copy (tests/test_cupy_host_tier.py), so its backend copies ahead; the NumPy
    backend's copy is done when to_host returns; a backend says so or makes none."""
    cupy_backend = pytest.importorskip("coop.backends.cupy")
    assert cupy_backend._BoundPool.can_copy_ahead is True
    assert cupy_backend._BoundPool.can_offload is True
    from coop.backends.base import Backend
    assert Backend.can_copy_ahead.fget(None) is False


def test_coop_replay_first_step_opens_the_tier_at_its_first_use(tmp_path, capsys):
    """coop replay opens the tier at the start below the bound, as replay() does; --first-step
    replays a live run's first step (the tier opens when a choice first needs it)."""
    from coop.cli.main import main
    path = write_trace(tmp_path / "ahead.jsonl", AHEAD)
    for flag, opened, out_bytes in (([], True, 5120), (["--first-step"], False, 7168)):
        assert main(["replay", str(path), "--budget", "6KiB", "--policy", "coop-offload",
                     "--lookahead", "0", "--json", *flag]) == 0
        result = json.loads(capsys.readouterr().out)
        assert (result["tier_open_at_start"], result["bytes_d2h"]) == (opened, out_bytes)
    assert main(["replay", str(path), "--budget", "6KiB", "--policy", "coop,coop-offload"]) == 3
    line = next(x for x in capsys.readouterr().out.splitlines() if "open at the start" in x)
    assert line.split()[-2:] == ["False", "True"]


@pytest.mark.parametrize("settle", [True, False])
def test_a_constant_made_where_it_lies_is_not_copied_out_ahead(tmp_path, settle):
    """AHEAD with w computed, then made a constant: settled (a gradient left in .grad), it is
    copied out ahead as the constant w was; made a constant where it lies (settle=False: a
    backward pass's root, or a gradient on its way down a pass that updates inside it), it is
    not, and leaves when k needs its range by a copy out then."""
    records = [AHEAD[0], call("g", [], 0, 2048),
               {"op": "materialize", "id": 0, **({} if settle else {"settle": False})},
               *AHEAD[2:]]
    path = write_trace(tmp_path / "made.jsonl", records)
    r = R.replay(path, budget=6144, policy="coop-offload", lookahead=0, check=True,
                 lower_bound_bytes=0)
    assert r["status"] == "ok"
    assert r["copies_ahead"] == (1 if settle else 0)
    assert r["bytes_d2h"] == 7168 and r["offloads"] == 3
    hidden = 2048 * D2H if settle else 0.0
    assert r["copy_hidden"] == pytest.approx(hidden)


#: two constants: a (2048 bytes) read by f, then 1e6 ns of x1, and by k right after h; b
#: (2560) read by g just before h, and next by m, after 1e6 ns of y1. h's output needs one of
#: them to leave (budget 6656): a is the stalest, b the one read last
NEXT = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 2048},
    {"op": "constant", "id": 1, "size": 2560},
    call("f", [0], 2, 512), call("x1", [2], 3, 512, 1e6), {"op": "release", "id": 2},
    call("g", [1], 4, 512), {"op": "release", "id": 3},
    call("h", [4], 5, 2048), {"op": "release", "id": 4},
    call("k", [0, 5], 6, 512), {"op": "release", "id": 5},
    call("y1", [6], 7, 512, 1e6), {"op": "release", "id": 6},
    call("m", [1, 7], 8, 512),
]


@pytest.mark.parametrize("lookahead, pricing, leaves", [
    (0, True, 0),        # no reference: priced by staleness, a leaves (and b at k for it)
    (1, False, 0),       # a reference, not priced by it: the same choice
    (1, True, 1),        # priced by the next read: b leaves, a stays for k
])
def test_a_constants_offload_is_priced_by_its_next_read(tmp_path, lookahead, pricing, leaves):
    """With lookahead the trace is the engine's reference: before a choice that counts
    offloads, each resident constant on offer is priced by the time until its next read
    (the copies over that time), not by its staleness. At h, a is the stalest but k reads it
    next; b was read just before but not again until m: the window offloads b, and a never
    leaves. Priced by staleness, a leaves at h and comes back for k, b leaving for it."""
    program = R.load(write_trace(tmp_path / "next.jsonl", NEXT))
    rp = Replayer(program, Arena(6656, 512), "coop-offload", 0.0, R.copy_cost(program), None,
                  R.host_link(program), lookahead)
    e = rp.engine
    e.read_pricing = pricing
    rp.run(0, 8)                                       # through h
    assert e.offloads == 1
    assert rp.resident_values() == [v for v in (0, 1, 4, 5) if v != leaves]
    if lookahead:
        # the time until each one's next read, from h's start: h; h, k and y1
        assert e.next_read(rp.storage_of(0)) == 1e4
        assert e.next_read(rp.storage_of(1)) == 1e4 + 1e4 + 1e6
    else:
        assert e.next_read(rp.storage_of(0)) is None
    rp.run(8)
    rp.finish()
    t = e.tier_counters()
    assert (t["offloads"], t["bytes_h2d"]) == ((1, 2560) if leaves else (2, 2048 + 2560))
    e.arena.check()


#: NEXT's a and b, but b is released unread right after h (as a gradient after its update),
#: and a is read next by m, after 2e6 ns of y1 and y2
RELEASED = NEXT[:10] + [
    {"op": "release", "id": 1},
    call("y1", [5], 6, 512, 1e6), {"op": "release", "id": 5},
    call("y2", [6], 7, 512, 1e6), {"op": "release", "id": 6},
    call("m", [0, 7], 8, 512),
]


@pytest.mark.parametrize("pricing", [False, True])
def test_a_constant_released_unread_is_priced_by_its_release(tmp_path, pricing):
    """With a reference, a constant the program releases before it reads it again (b after h)
    is offered at its copy out alone, over the time until its release: an offload would
    free its room only until then. At h the window then offloads a, whose copy back a
    prefetch hides under y2, instead of copying b out for nothing; priced as if the next
    step read it again (release_pricing off), b leaves, its copy out all exposed."""
    program = R.load(write_trace(tmp_path / "released.jsonl", RELEASED))
    d2h, h2d = R.host_link(program)
    rp = Replayer(program, Arena(6656, 512), "coop-offload", 0.0, R.copy_cost(program), None,
                  (d2h, h2d), 2)
    e = rp.engine
    e.release_pricing = pricing
    rp.run(0, 7)                                       # up to h
    b = rp.storage_of(1)
    # from g's start, the last op run: b is released after g and h, unread; m reads a
    assert e.dies_at(b) == 2e4 and e.dies_at(rp.storage_of(0)) is None
    rp.run(7, 8)                                       # h
    assert rp.resident_values() == ([1, 4, 5] if pricing else [0, 4, 5])
    if pricing:
        assert e.dies_at(b) == 1e4                     # from h's start
    rp.run(8)
    rp.finish()
    t = e.tier_counters()
    assert t["copy_exposed"] == pytest.approx((2048 if pricing else 2560) * d2h)
    assert (t["prefetches"], t["fetches"], t["bytes_h2d"]) == ((1, 0, 2048) if pricing
                                                               else (0, 0, 0))
    e.arena.check()


def test_a_storage_id_reused_after_death_has_no_reads_in_the_reference():
    """The reference's reads are a storage's, not its id's: a constant that dies takes its
    reads with it, so a new constant given the same id has no known next read."""
    rt = coop.Runtime(coop.numpy_allocator(1 << 20), policy="coop-offload", cost="cpu",
                      lookahead=8)
    w = rt.tensor(np.ones(1000, np.float32))
    a = rt.tensor(np.ones(1000, np.float32))
    b = (a * 2.0) * w
    rt.mark_step()                      # the reference: a, then w
    d = w * 3.0                         # the next step's first op: a position in it
    sid = a.storage.sid
    assert rt._engine.next_read(sid) is not None
    assert rt._engine.next_read(w.storage.sid) is not None
    del a, b
    c = rt.tensor(np.zeros(1000, np.float32))
    assert c.storage.sid == sid         # the id is reused
    assert rt._engine.next_read(sid) is None
    assert rt._engine.next_read(w.storage.sid) is not None
    del c, d
    rt.arena.check()


def test_a_storage_that_dies_within_a_step_leaves_no_reads_to_its_ids_next_owner():
    """A live step lists each op's constant inputs by storage id; a constant read and freed
    within the step, its id then reused by another, leaves the new one no reads in the
    reference the step becomes (nor does a constant read and freed, its id unused)."""
    rt = coop.Runtime(coop.numpy_allocator(1 << 20), policy="coop-offload", cost="cpu",
                      lookahead=8)
    w = rt.tensor(np.ones(1000, np.float32))
    x = rt.tensor(np.ones(1000, np.float32))
    y = x * w                           # op 0 reads x and w
    sid = x.storage.sid
    del x, y                            # x dies, its id free
    x2 = rt.tensor(np.zeros(1000, np.float32))
    assert x2.storage.sid == sid        # the id is reused
    z = w * 3.0                         # op 1 reads w
    gone = rt.tensor(np.ones(10, np.float32))
    g = gone * 2.0                      # op 2 reads gone
    gone_sid = gone.storage.sid
    del gone, g
    rt.mark_step()
    z = w * 3.0                         # a position in the next step
    assert rt._engine.next_read(w.storage.sid) is not None
    assert rt._engine.next_read(sid) is None
    assert rt._engine.next_read(gone_sid) is None
    u = x2 * 2.0                        # now read: known from the next step on
    rt.mark_step()
    z = w * 3.0
    assert rt._engine.next_read(sid) is not None
    del z, u, x2
    rt.arena.check()


def test_a_lookahead_without_marked_steps_warns_and_bounds_its_list():
    """A live run with a lookahead lists each op's constant inputs until the step is marked;
    a loop that never marks one is told how to, and the list is dropped rather than grown
    without end. A step marked afterwards is the reference as usual."""
    rt = coop.Runtime(coop.numpy_allocator(1 << 20), policy="coop-offload", cost="cpu",
                      lookahead=8)
    assert rt._engine.max_step_ops == 1 << 20
    rt._engine.max_step_ops = 10
    a = rt.tensor(np.ones(100, np.float32))
    with pytest.warns(RuntimeWarning, match=r"no training step was marked in 10 ops.*"
                      r"call Runtime\.mark_step\(\) after each training step") as got:
        for _ in range(25):
            b = a * 2.0
    assert len(got) == 2                # at the 11th op and the 21st
    rt.mark_step()                      # the reference: the last 5 ops, each reading a
    b = a * 2.0
    assert rt._engine.next_read(a.storage.sid) is not None
    del b
    rt.arena.check()


def test_a_live_run_prices_offloads_by_the_previous_steps_reads():
    """In a live run with lookahead the previous step is the reference: from the second step
    on, after the forward pass, every parameter's next read is known (the backward pass or
    the update reads it, within a step), and the training stays bit-identical with offloads
    priced by it. Without lookahead nothing is known."""
    budget, _, (ref_losses, reference) = below_the_bound(lambda rt: train_gpt(rt, steps=3))
    for lookahead in (0, 8):
        rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop-offload", cost="cpu",
                          lookahead=lookahead)

        def each(i, model):
            until = [rt._engine.next_read(p.storage.sid) for p in model.parameters()]
            if lookahead and i > 0:
                length = rt._engine.stats()["clock"] / i    # about one step
                assert all(t is not None and 0 < t < 2 * length for t in until)
            else:
                assert until == [None] * len(until)

        losses, got = train_gpt(rt, steps=3, each=each)
        assert losses == ref_losses
        for a, b in zip(got, reference):
            np.testing.assert_array_equal(a, b)
        assert rt.stats()["offloads"] > 0
        rt.arena.check()


#: three 2048-byte constants, then an op that reads the last: at 4096 bytes (below the
#: recompute-only bound) a and b fit the arena and c finds no free range
STEADY = [
    {"op": "meta", "alignment": 512},
    {"op": "constant", "id": 0, "size": 2048},
    {"op": "constant", "id": 1, "size": 2048},
    {"op": "constant", "id": 2, "size": 2048},
    call("f", [2], 3, 512),
]


def test_a_later_step_starts_with_the_constants_that_do_not_fit_in_the_host_tier(tmp_path):
    """Below the bound a replay stands for a loop's later step (its tier opened at the start):
    c, which no free range holds before the first op, starts in the host tier, copied out by
    the step before (nothing charged); f then brings it back (2048 bytes in) and the room for
    it and for f's output is made by offloading a and b (4096 bytes out). Replayed as a live
    run's first step (lower_bound_bytes=0), c is made in the arena, a and b leaving for it and
    for f's output, and nothing comes back; a host tier too small for c places it so too, and
    refuses a and b: out of memory, nothing lost."""
    path = write_trace(tmp_path / "steady.jsonl", STEADY)
    assert R.unlimited(R.load(path))["lower_bound_bytes"] > 4096
    later = R.replay(path, budget=4096, policy="coop-offload", lookahead=0, check=True)
    assert (later["status"], later["tier_open_at_start"], later["constants_on_host"]) == \
        ("ok", True, 1)
    assert (later["fetches"], later["bytes_h2d"], later["bytes_d2h"]) == (1, 2048, 4096)
    assert later["offloads"] == 2
    first = R.replay(path, budget=4096, policy="coop-offload", lookahead=0, check=True,
                     lower_bound_bytes=0)
    assert (first["status"], first["tier_open_at_start"], first["constants_on_host"]) == \
        ("ok", False, 0)
    # (and c, made resident, is copied out ahead once the arena has had to make room)
    assert (first["fetches"], first["bytes_h2d"], first["bytes_d2h"], first["copies_ahead"]) == \
        (0, 0, 6144, 1)
    full = R.replay(path, budget=4096, policy="coop-offload", lookahead=0, check=True,
                    host_budget=1024)
    assert (full["status"], full["constants_on_host"], full["host_refusals"]) == ("oom", 0, 2)
    # no tier, no start in it
    assert R.replay(path, budget=4096, policy="coop")["status"] == "oom"


class Ordered(SizeExecutor):
    """Sizes only, checking the order a device needs of a copy back ahead (a prefetch: fetch
    with ahead): nothing moves, slides, frees or copies out its storage before the engine
    awaits it (await_fetch); kernels' inputs are checked by the caller (loop)."""

    def __init__(self):
        self.coming = set()
        self.awaited = set()
        self.moved_after_await = 0

    def fetch(self, s, placement, ahead=False):
        SizeExecutor.fetch(self, s, placement, ahead)
        if ahead:
            self.coming.add(s)
        return 0

    def await_fetch(self, s):
        assert s in self.coming, f"storage {s} awaited, but no copy back ahead is coming"
        self.coming.discard(s)
        self.awaited.add(s)
        return 0

    def relocate(self, s, src, dst):
        assert s not in self.coming, f"storage {s} moved before its copy back was awaited"
        self.moved_after_await += s in self.awaited
        return True

    def slide(self, s, src, dst):
        assert s not in self.coming, f"storage {s} slid before its copy back was awaited"
        return True

    def drop(self, s):
        assert s not in self.coming, f"storage {s} freed before its copy back was awaited"
        self.awaited.discard(s)
        return SizeExecutor.drop(self, s)

    def offload(self, s, ahead=False):
        assert s not in self.coming, f"storage {s} copied out before its copy back was awaited"
        return True


def engine_loop(params, body, budget, lookahead, steps=3):
    """A live training loop through the engine's API (as coop.Runtime drives it) on an Ordered
    executor: `params` constants (their sizes); each step runs body's ops, each (two input
    indices into the parameters and the step's values so far, output bytes, cost, and whether
    the step's oldest value is released after it), releases its values and ends (step())."""
    ex = Ordered()
    e = Engine(Arena(budget, 512), "coop-offload", ex, lookahead=lookahead)
    e.step_prefetch = True
    ps = []
    for nbytes in params:
        ps.append(e.constant(nbytes))
        e.retain(ps[-1])
    for _ in range(steps):
        acts = []
        for (i, j), nbytes, cost, release in body:
            pool = ps + acts
            ins = list(dict.fromkeys([pool[i % len(pool)], pool[j % len(pool)]]))
            o = e.begin(ins, CHEAP)
            assert not set(ins) & ex.coming, "a kernel's input read before its copy back came"
            (s,) = e.finish_call(o, cost, [(nbytes, -1)])
            e.retain(s)
            acts.append(s)
            if release and len(acts) > 1:
                e.unref(acts.pop(0))
        for s in acts:
            e.unref(s)
        e.step()
        e.arena.check()
    assert e.pinned() == {}
    return e, ex


def test_a_prefetched_storage_is_awaited_before_a_move_reads_it():
    """A live loop (found by a random search) whose window moves a parameter the step's
    prefetch is still bringing back: the move waits for the copy (a device's move would read
    bytes the copy has not written yet), and so does every reader, free and copy out."""
    params = [1536, 2048, 512, 512, 1536, 512]
    body = [((43, 77), 512, 1e4, False), ((56, 53), 2048, 1e3, False),
            ((58, 74), 3072, 1e3, True), ((99, 73), 512, 1e3, False),
            ((59, 96), 512, 1e5, True), ((95, 80), 2560, 1e5, True),
            ((8, 76), 512, 1e5, False), ((75, 95), 1024, 1e4, True),
            ((50, 52), 512, 1e4, False), ((52, 20), 512, 1e5, False)]
    e, ex = engine_loop(params, body, 6144, lookahead=8)
    assert ex.moved_after_await >= 1 and e.tier_counters()["prefetches"] > 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(params=st.lists(st.integers(1, 4).map(lambda k: 512 * k), min_size=2, max_size=6),
       body=st.lists(st.tuples(st.tuples(st.integers(0, 99), st.integers(0, 99)),
                               st.integers(1, 6).map(lambda k: 512 * k),
                               st.sampled_from([1e3, 1e4, 1e5]), st.booleans()),
                     min_size=3, max_size=10),
       budget=st.sampled_from([3072, 4096, 6144, 8192]), lookahead=st.sampled_from([2, 8]))
def test_a_live_loops_prefetches_are_awaited_before_their_storage_is_touched(
        params, body, budget, lookahead):
    try:
        engine_loop(params, body, budget, lookahead)
    except coop.OutOfMemoryError:
        pass
