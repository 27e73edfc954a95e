"""coop's moves outside the core (docs/core.md, Moving): the engine re-points a moved storage
and charges the copy, replays count and charge moves, host runs move their arrays' bytes
inside the arena and train bit-identically, and coop (whose window only evicts) never moves."""
import numpy as np
import pytest
from _gradcheck import train_deep_mlp

import coop
import coop.trace.replay as R
from coop._core import CHEAP, EXPENSIVE
from coop.engine import Engine, SizeExecutor
from coop.engine.cost import DEVICES
from coop.models import paper

KIB = 1024


def call(e, inputs, nbytes, cost=10.0, placement=CHEAP):
    o = e.begin(list(inputs), placement)
    (s,) = e.finish_call(o, cost, [(nbytes, -1)])
    e.retain(s)
    return s


def wall_layout(policy):
    """3 KiB: a freed tensor's KiB at 0, a constant at 1 KiB, free above: the constant is a
    wall between the two free KiB."""
    arena = coop.Arena(3 * KIB, 512)
    e = Engine(arena, policy, SizeExecutor(), 0.0, 0.5)      # moving a byte costs 0.5
    a = call(e, [], KIB, placement=EXPENSIVE)
    c = e.constant(KIB)
    e.retain(c)
    e.unref(a)
    assert arena.pieces() == [(0, KIB, True, -1), (KIB, KIB, False, c), (2 * KIB, KIB, True, -1)]
    return e, arena, c


@pytest.mark.parametrize("policy", ["coop", "coop-move-if-blocked", "coop-per-byte"])
def test_the_engine_moves_a_wall_repoints_it_and_charges_the_copy(policy):
    """No evict-only window covers 2 KiB (the constant is a wall): the moving policies move
    it; coop-move-if-blocked's arena has the rule on, coop's off, coop-per-byte's compares
    windows per byte freed; the move's cost per byte of
    the request prices the room from then on."""
    e, arena, c = wall_layout(policy)
    assert arena.moves_if_blocked == (policy == "coop-move-if-blocked")
    assert arena.excess_weight == (1.0 if policy == "coop-per-byte" else 0.0)
    assert arena.room_price == 0.0
    b = call(e, [], 2 * KIB)
    assert e.info(c)["offset"] == 2 * KIB and e.info(b)["offset"] == 0
    # the choice carried out prices the room from now on: its cost (the constant's copy, 512,
    # over its staleness, 10: untouched since 0 at clock 10) per byte of the 2 KiB request
    assert arena.room_price == (KIB * 0.5 / 10.0) / (2 * KIB) == 0.025
    stats = e.stats()
    assert (stats["window_moves"], stats["bytes_moved"], stats["move_cost"]) == (1, KIB, 512.0)
    assert stats["cost_total"] == 10.0 + 10.0 + 512.0 and e.clock == 532.0
    assert stats["cost_first"] == 20.0 and stats["compute_overhead"] == 532.0 / 20.0
    assert stats["evictions"] == 0
    arena.check()


def test_coop_without_moves_cannot_pass_the_wall():
    e, arena, c = wall_layout("coop-no-move")
    assert arena.move_cost == float("inf")
    with pytest.raises(coop.OutOfMemoryError):
        call(e, [], 2 * KIB)
    assert e.info(c)["offset"] == KIB and e.stats()["window_moves"] == 0
    arena.check()


def test_a_held_storage_never_moves():
    e, arena, c = wall_layout("coop")
    arena.set_movable(c, False)        # what the engine does when a user's array holds it
    with pytest.raises(coop.OutOfMemoryError):
        call(e, [], 2 * KIB)
    arena.check()


@pytest.fixture(scope="module")
def resnet_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("move") / "resnet50.jsonl"
    paper.record_trace("resnet50", path, batch=2)
    return R.load(path)


def test_replays_count_and_charge_moves(resnet_trace):
    rate = R.copy_cost(resnet_trace)
    assert rate == 2e9 / DEVICES["a100-80gb"].bytes_per_s
    peak = R.peak(resnet_trace)
    moved = 0
    for ratio in (0.6, 0.5, 0.4, 0.35, 0.3):
        with_moves = R.replay(resnet_trace, ratio=ratio, policy="coop", thrash=None,
                              peak_bytes=peak)
        without = R.replay(resnet_trace, ratio=ratio, policy="coop-no-move", thrash=None,
                           peak_bytes=peak)
        assert (without["window_moves"], without["bytes_moved"], without["move_cost"]) == (0, 0, 0)
        assert with_moves["move_cost"] == pytest.approx(with_moves["bytes_moved"] * rate,
                                                        rel=1e-12)
        if with_moves["status"] == "ok":
            assert with_moves["compute_overhead"] == \
                with_moves["cost_total"] / with_moves["cost_first"]
        moved += with_moves["window_moves"]
    assert moved > 0


def train(rt, steps=3):
    return train_deep_mlp(rt, steps)


def test_host_runs_move_arrays_and_train_bit_identically():
    """Moves copy the bytes inside the arena (numpy.copyto): the parameters after training
    under a budget where coop moves equal those of an unlimited run, bit for bit."""
    rate = 2e9 / DEVICES["a100-80gb"].bytes_per_s      # modelled costs: moves are cheap
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="a100-80gb")
    reference = train(rt)
    peak = rt.stats()["peak_used_bytes"]
    moved = 0
    for ratio in (0.8, 0.75, 0.6):
        for policy in ("coop", "coop-no-move"):
            rt = coop.Runtime(coop.numpy_allocator(int(ratio * peak)), policy=policy,
                              cost="a100-80gb")
            try:
                got = train(rt)
            except coop.OutOfMemoryError:
                continue
            stats = rt.stats()
            if policy == "coop-no-move":
                assert stats["window_moves"] == 0
            moved += stats["window_moves"]
            assert stats["move_cost"] == pytest.approx(stats["bytes_moved"] * rate, rel=1e-12)
            for a, b in zip(got, reference):
                np.testing.assert_array_equal(a, b)
            rt.arena.check()
    assert moved > 0


def test_a_recorded_host_run_with_moves_replays_exactly(tmp_path):
    """The trace records the run's move cost: its replay moves the same pieces, at the same
    cost, with the same evictions and recomputes."""
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="a100-80gb")
    train(rt)
    peak = rt.stats()["peak_used_bytes"]
    budget = int(0.75 * peak)       # a budget where this run moves (5 moves; 0.8 and 0.7: none)
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop", cost="a100-80gb")
    path = tmp_path / "moves.jsonl"
    with rt.record(path):
        train(rt)
    stats = rt.stats()
    assert stats["window_moves"] > 0
    result = R.replay(path, budget=budget, policy="coop", thrash=None)
    assert result["status"] == "ok"
    keys = ("window_moves", "bytes_moved", "move_cost", "recomputes", "evictions", "searches",
            "cost_total", "peak_used_bytes")
    assert {k: result[k] for k in keys} == {k: stats[k] for k in keys}


def host_wall(hold):
    """4 KiB host arena: a freed KiB at 0 under constant b (1 KiB), a small constant c, free
    space above; an op making 2 KiB from c fits only if b moves up. hold: the program keeps
    b's raw array past a borrow (its memory is held: it must not move)."""
    rt = coop.Runtime(coop.numpy_allocator(4096), policy="coop", cost="cpu")
    a = rt.tensor(np.ones(256, np.float32))
    b = rt.tensor(np.arange(256, dtype=np.float32))
    c = rt.tensor(np.ones(64, np.float32))
    del a
    assert rt.arena.pieces() == [(0, 1024, True, -1), (1024, 1024, False, 1),
                                 (2048, 256, False, 2), (2304, 1792, True, -1)]
    held = None
    if hold:
        with b.borrow() as array:
            held = array
    grow = coop.Kernel(lambda x: np.concatenate([x] * 8), name="grow")
    return rt, b, c, grow, held


def test_a_host_move_copies_the_bytes_into_the_arena():
    rt, b, c, grow, _ = host_wall(hold=False)
    out = rt.apply(grow, c)
    assert rt.arena.pieces() == [(0, 2048, False, 0), (2048, 256, False, 2),   # a's id, reused
                                 (2304, 1024, False, 1), (3328, 768, True, -1)]
    assert rt.stats()["window_moves"] == 1 and rt.stats()["evictions"] == 0
    np.testing.assert_array_equal(b.numpy(), np.arange(256, dtype=np.float32))
    np.testing.assert_array_equal(out.numpy(), np.ones(512, np.float32))
    with b.borrow() as array:      # b's array is the moved memory itself
        assert rt.backend.offset_of(array) == 2304
    rt.arena.check()


def test_memory_a_program_holds_never_moves():
    """b's memory is held by the program and c's too: neither moves, and the op fails."""
    rt, b, c, grow, held = host_wall(hold=True)
    with c.borrow() as array:
        held_c = array
    with pytest.raises(coop.OutOfMemoryError):
        rt.apply(grow, c)
    assert rt.stats()["window_moves"] == 0
    assert rt.backend.offset_of(held) == 1024 and rt.backend.offset_of(held_c) == 2048
    np.testing.assert_array_equal(held, np.arange(256, dtype=np.float32))
    np.testing.assert_array_equal(held_c, np.ones(64, np.float32))
    rt.arena.check()


def test_a_failed_first_run_runs_again_after_its_input_moved():
    """b is held; the kernel's own input c is a wall while the kernel runs, so its 2 KiB
    allocation fails; coop aborts it, moves c (no kernel holds it now) into the free KiB at 0,
    and runs it again: it fits above b. coop-no-move fails."""
    rt, b, c, grow, held = host_wall(hold=True)
    out = rt.apply(grow, c)
    assert rt.arena.pieces() == [(0, 256, False, 2), (256, 768, True, -1),
                                 (1024, 1024, False, 1), (2048, 2048, False, 0)]
    stats = rt.stats()
    assert (stats["window_moves"], stats["bytes_moved"], stats["evictions"]) == (1, 256, 0)
    assert rt._engine.room_made == 1
    assert rt.backend.offset_of(held) == 1024
    np.testing.assert_array_equal(out.numpy(), np.ones(512, np.float32))
    np.testing.assert_array_equal(c.numpy(), np.ones(64, np.float32))
    rt.arena.check()
    rt = coop.Runtime(coop.numpy_allocator(4096), policy="coop-no-move", cost="cpu")
    a = rt.tensor(np.ones(256, np.float32))
    b = rt.tensor(np.arange(256, dtype=np.float32))
    c = rt.tensor(np.ones(64, np.float32))
    del a
    with b.borrow() as array:
        held = array
    with pytest.raises(coop.OutOfMemoryError):
        rt.apply(grow, c)
    assert rt.stats()["window_moves"] == 0 and rt._engine.room_made == 0
    rt.arena.check()
