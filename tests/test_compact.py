"""Compaction inside one window (docs/core.md, "Moving"): when the moving window finds no free
destinations for a kernel's inputs, coop evicts one window's candidates and slides its movable
pieces to its low end; the core's slide keeps every invariant, the engine charges each slide as
a move, host arrays keep their bytes, and replays count what the live run did."""
import numpy as np
import pytest

import coop
import coop.trace.replay as R
from coop import ops
from coop._core import CHEAP, EXPENSIVE, LOG_MOVE
from coop.engine import Engine, SizeExecutor

KIB = 1024


def scattered(cost_of_first=100.0):
    """512 bytes in 64-byte pieces: movers (movable, not evictable) M1..M4 at 0, 128, 256,
    384, each followed by a candidate C1..C4; no free byte. C1 costs cost_of_first, the
    others 1."""
    arena = coop.Arena(512, 64)
    arena.move_cost = 0.5
    for i in range(8):
        mover = i % 2 == 0
        arena.add_storage(i + 1, cost=0.0 if mover else (cost_of_first if i == 1 else 1.0),
                          evictable=not mover)
        assert arena.allocate(64, coop.LOWEST, storage=i + 1) == 64 * i
    return arena


def freeing(arena, calls):
    def evict(victims):
        calls.append(("evict", victims))
        for sid in victims:
            arena.free(arena.storage_info(sid)["offset"])
    return evict


def test_compaction_evicts_one_window_and_slides_its_movers_down():
    arena = scattered()
    # the moving window: every mover needs a free piece outside, and there is none
    with pytest.raises(coop.OutOfMemoryError):
        arena.allocate_or_evict(192, EXPENSIVE, "coop", 10.0, freeing(arena, []))
    arena.check()
    calls = []
    arena.start_log()
    offset = arena.compact(192, 10.0, freeing(arena, calls),
                           lambda sid, src, dst: calls.append(("slide", sid, src, dst)))
    # C1 (cost 100) stays: the window is C2 M3 C3 M4 C4 (h 0.1 each, two 64-byte copies)
    assert offset == 320
    assert calls == [("evict", [4, 6, 8]), ("slide", 5, 256, 192), ("slide", 7, 384, 256)]
    assert arena.pieces() == [(0, 64, False, 1), (64, 64, False, 2), (128, 64, False, 3),
                              (192, 64, False, 5), (256, 64, False, 7), (320, 192, True, -1)]
    assert arena.take_log() == [192, -1, 320, -1, 448, -1,
                                256, LOG_MOVE, 192, 64, 5, 384, LOG_MOVE, 256, 64, 7]
    stats = arena.stats()
    assert (stats["evictions"], stats["bytes_evicted"]) == (3, 192)
    assert (stats["window_moves"], stats["bytes_moved"], stats["move_cost"]) == (2, 128, 64.0)
    arena.check()
    assert arena.allocate(192) == 320


def test_compaction_needs_moving_on_and_a_window_without_walls():
    arena = scattered()
    arena.move_cost = float("inf")
    assert arena.compact(192, 10.0, freeing(arena, [])) == -1
    arena = scattered()
    arena.pin(5)               # M3 and M4 pinned: no run of three candidates around them
    arena.pin(7)
    calls = []
    assert arena.compact(192, 10.0, freeing(arena, calls)) == -1
    assert calls == [] and arena.stats()["evictions"] == 0
    arena.check()


def test_a_refused_slide_makes_the_storage_unmovable_and_compaction_fails():
    arena = scattered()
    calls = []
    assert arena.compact(192, 10.0, freeing(arena, calls), lambda sid, src, dst: False) == -1
    assert calls == [("evict", [4, 6, 8])]           # the evictions stand: a valid state
    assert not arena.storage_info(5)["movable"] and arena.storage_info(5)["offset"] == 256
    assert arena.stats()["window_moves"] == 0
    arena.check()


def test_slide_keeps_the_arena_exact():
    arena = coop.Arena(1024, 64)
    for sid in (1, 2, 3):
        arena.add_storage(sid)
        arena.allocate(128, coop.LOWEST, storage=sid)
    arena.free(128)                      # 2's piece: free range 128..256 below 3
    arena.slide(3, 192)                  # inside it: the free piece below shrinks
    assert arena.pieces() == [(0, 128, False, 1), (128, 64, True, -1), (192, 128, False, 3),
                              (320, 704, True, -1)]     # merged with the free space above
    arena.check()
    arena.slide(3, 128)                  # to the free piece's start: it goes
    assert arena.pieces() == [(0, 128, False, 1), (128, 128, False, 3), (256, 768, True, -1)]
    arena.check()
    arena.add_storage(4)
    assert arena.allocate(128, coop.LOWEST, storage=4) == 256    # in use above 3
    arena.free(0)
    arena.slide(3, 0)                    # to offset 0; a used piece above: a new free piece
    assert arena.pieces() == [(0, 128, False, 3), (128, 128, True, -1), (256, 128, False, 4),
                              (384, 640, True, -1)]
    arena.check()
    assert arena.storage_info(3)["offset"] == 0


@pytest.mark.parametrize("dst, why", [(64, "inside the free piece just below"),
                                      (96, "aligned"), (256, "inside the free piece just below")])
def test_slide_refuses_a_bad_destination_and_changes_nothing(dst, why):
    arena = coop.Arena(1024, 64)
    for sid in (1, 2, 3):
        arena.add_storage(sid)
        arena.allocate(128, coop.LOWEST, storage=sid)
    arena.free(128)
    before = arena.pieces()
    with pytest.raises(ValueError, match=why):
        arena.slide(3, dst)
    assert arena.pieces() == before
    arena.check()
    arena.add_storage(9)
    with pytest.raises(ValueError, match="not resident"):
        arena.slide(9, 128)


def call(e, inputs, nbytes, cost=10.0, placement=CHEAP):
    o = e.begin(list(inputs), placement)
    (s,) = e.finish_call(o, cost, [(nbytes, -1)])
    e.retain(s)
    return s


def test_a_first_run_compacts_around_its_scattered_inputs():
    """8 KiB: inputs x0..x3 each followed by an evictable c; the 3 KiB output of an op over
    the x's fits only once a window is compacted. c3 is the freshest (its h is the largest):
    the window is c0 x1 c1 x2 c2, and x1, x2 slide down."""
    arena = coop.Arena(8 * KIB, 512)
    e = Engine(arena, "coop", SizeExecutor(), 0.0, 0.5)      # moving a byte costs 0.5
    xs, cs = [], []
    for i in range(4):
        xs.append(call(e, [], KIB, placement=EXPENSIVE))
        cs.append(call(e, [], KIB, cost=100.0 if i == 0 else 10.0, placement=EXPENSIVE))
    assert [p[0] for p in arena.pieces()] == [i * KIB for i in range(8)]
    arena.start_log()
    o = e.begin(xs, CHEAP)
    (out,) = e.finish_call(o, 10.0, [(3 * KIB, -1)])
    assert arena.pieces() == [(0, KIB, False, xs[0]), (KIB, KIB, False, xs[1]),
                              (2 * KIB, KIB, False, xs[2]), (3 * KIB, 3 * KIB, False, out),
                              (6 * KIB, KIB, False, xs[3]), (7 * KIB, KIB, False, cs[3])]
    assert [e.info(x)["offset"] for x in xs] == [0, KIB, 2 * KIB, 6 * KIB]
    assert arena.take_log() == [KIB, -1, 3 * KIB, -1, 5 * KIB, -1,
                                2 * KIB, LOG_MOVE, KIB, KIB, xs[1],
                                4 * KIB, LOG_MOVE, 2 * KIB, KIB, xs[2], 3 * KIB, 3 * KIB]
    stats = e.stats()
    assert (stats["compactions"], stats["room_made"], stats["evictions"]) == (1, 1, 3)
    assert (stats["window_moves"], stats["bytes_moved"], stats["move_cost"]) == (2, 2 * KIB, 1024.0)
    assert stats["cost_total"] == 170.0 + 10.0 + 1024.0 == e.clock
    arena.check()


def test_coop_without_moves_does_not_compact():
    arena = coop.Arena(8 * KIB, 512)
    e = Engine(arena, "coop-no-move", SizeExecutor(), 0.0, 0.5)
    xs = []
    for i in range(4):
        xs.append(call(e, [], KIB, placement=EXPENSIVE))
        call(e, [], KIB, placement=EXPENSIVE)
    o = e.begin(xs, CHEAP)
    with pytest.raises(coop.OutOfMemoryError):
        e.finish_call(o, 10.0, [(3 * KIB, -1)])
    assert e.stats()["compactions"] == 0
    arena.check()


def test_a_host_kernel_runs_after_its_inputs_slide_and_every_byte_is_kept():
    """The same layout on the host: x0..x3 (constants) each followed by an evictable c; a
    kernel concatenating the x's fails, coop compacts c0 x1 c1 x2 c2 (memmove of x1, x2)
    and runs it again."""
    rt = coop.Runtime(coop.numpy_allocator(8 * KIB), policy="coop", cost="cpu")
    values = [np.arange(256, dtype=np.float32) + 1000 * i for i in range(4)]
    xs, gaps = [], []
    for v in values:
        xs.append(rt.tensor(v))
        gaps.append(rt.tensor(np.zeros(256, np.float32)))
    del gaps
    double = coop.Kernel(lambda x: x + x, name="double", cls=coop.EXPENSIVE)   # low end first
    cs = [rt.apply(double, x) for x in xs]
    assert rt.arena.pieces() == [(i * KIB, KIB, False, i) for i in range(8)]
    cat = coop.Kernel(lambda a, b, c, d: np.concatenate([a[:192], b[:192], c[:192], d[:192]]),
                      name="cat")
    rt.arena.start_log()
    out = rt.apply(cat, *xs)
    assert rt.arena.pieces() == [(0, KIB, False, 0), (KIB, KIB, False, 2),
                                 (2 * KIB, KIB, False, 4), (3 * KIB, 3 * KIB, False, 8),
                                 (6 * KIB, KIB, False, 6), (7 * KIB, KIB, False, 7)]
    assert rt.arena.take_log() == [KIB, -1, 3 * KIB, -1, 5 * KIB, -1,
                                   2 * KIB, LOG_MOVE, KIB, KIB, 2, 4 * KIB, LOG_MOVE, 2 * KIB, KIB,
                                   4, 3 * KIB, 3 * KIB]
    stats = rt.stats()
    assert (stats["compactions"], stats["window_moves"], stats["bytes_moved"]) == (1, 2, 2 * KIB)
    assert (stats["evictions"], stats["bytes_evicted"]) == (3, 3 * KIB)
    for x, v in zip(xs, values):
        np.testing.assert_array_equal(x.numpy(), v)
    with xs[1].borrow() as array:        # x1's array is the slid memory itself
        assert rt.backend.offset_of(array) == KIB
    np.testing.assert_array_equal(out.numpy(), np.concatenate([v[:192] for v in values]))
    for c, v in zip(cs, values):         # evicted ones are recomputed from the slid inputs
        np.testing.assert_array_equal(c.numpy(), v + v)
    assert rt.backend.calls()["foreign"] == 0
    rt.arena.check()


def train_rnn(rt, steps=2, T=32, N=16, H=16):
    """A ReLU-tanh RNN whose T states are stacked (as a BiLSTM's outputs are): the stack's
    inputs are scattered among evictable intermediates. Returns a copy of its weight."""
    from coop.optim import SGD
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((N, H)))
    w = rt.tensor(rng.standard_normal((H, H)) / np.sqrt(H), requires_grad=True)
    opt = SGD([w], lr=0.01)
    for _ in range(steps):
        h = x
        hs = []
        for _ in range(T):
            h = ops.tanh(ops.relu(h @ w) + x)
            hs.append(h)
        loss = ops.mean(ops.stack(hs))
        del h, hs
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    return w.numpy().copy()


def test_host_runs_that_compact_train_bit_identically():
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="a100-80gb")
    reference = train_rnn(rt)
    peak = rt.stats()["peak_used_bytes"]
    compacted = 0
    for ratio in (0.7, 0.8):
        rt = coop.Runtime(coop.numpy_allocator(int(ratio * peak)), policy="coop",
                          cost="a100-80gb")
        np.testing.assert_array_equal(train_rnn(rt), reference)
        compacted += rt.stats()["compactions"]
        assert rt.backend.calls()["foreign"] == 0
        rt.arena.check()
    assert compacted > 0


def test_a_recorded_host_run_that_compacts_replays_exactly(tmp_path):
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="a100-80gb")
    train_rnn(rt)
    budget = int(0.7 * rt.stats()["peak_used_bytes"])
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop", cost="a100-80gb")
    path = tmp_path / "compact.jsonl"
    with rt.record(path):
        train_rnn(rt)
    stats = rt.stats()
    assert stats["compactions"] > 0
    result = R.replay(path, budget=budget, policy="coop", thrash=None, check=True)
    assert result["status"] == "ok"
    keys = ("compactions", "room_made", "window_moves", "bytes_moved", "move_cost",
            "recomputes", "evictions", "searches", "cost_total", "peak_used_bytes")
    assert {k: result[k] for k in keys} == {k: stats[k] for k in keys}



def test_the_cupy_executor_moves_but_never_slides(monkeypatch):
    """A device's overlapping copy is not done: on the CuPy pool coop moves pieces (to free
    destinations) but never compacts (fake driver, no GPU)."""
    pytest.importorskip("cupy")
    from _cupy_driver import install

    from coop.backends import cupy as backend
    install(monkeypatch, backend)
    import cupy
    try:
        rt = coop.Runtime(coop.allocator("1MiB"), policy="coop", cost="h100")
        executor = rt._engine.executor
        assert executor.can_move and not executor.can_slide
        assert executor.slide(0, 1024, 0) is False
    finally:
        cupy.cuda.set_allocator(None)
