"""Recording a run (docs/trace-format.md) and the simulation backend: the records and their
ids/sizes are exact, a trace is of the program (the same under any budget), and the simulator
takes the very decisions of the host backend on the same program."""
import json

import numpy as np
import pytest

import coop
from _arena import SEARCH_TIMES
from _graphs import (ADDC, MATMUL, MiB, RELU_, T_AND_DEC, TRANSPOSE, evict, lower_bound,
                     random_graph, run_graph)

CPU = coop.DEVICES["cpu"]


def records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_recorded_run_writes_the_documented_records(tmp_path, rt):
    path = tmp_path / "run.jsonl"
    with rt.record(path) as writer:
        assert rt.trace is writer
        x = rt.tensor(np.arange(6.0).reshape(2, 3))
        w = rt.tensor(np.ones((3, 2)))
        rt.mark_start()
        y = rt.apply(MATMUL, x, w)                           # 2x2: 32 bytes
        v = rt.apply(TRANSPOSE, y)
        a, b = rt.apply(T_AND_DEC, y)
        out = rt.apply(RELU_, b)
        z = rt.apply(ADDC, b, c=1.0)
        del z
        evict(rt, b)                                         # recomputes are not recorded
        assert np.array_equal(b.numpy(), [[0.0, 0.0], [3.0, 3.0]])
        del a, b, out
        del y, v
    assert rt.trace is None
    call = lambda name, inputs, outputs, cost, cls: {                  # noqa: E731
        "op": "call", "name": name, "inputs": inputs, "cost": cost, "cls": cls,
        "outputs": [{"id": i, "size": s, "alias": k} for i, s, k in outputs]}
    got = records(path)
    assert got[0] == {"op": "meta", "alignment": 64, "policy": "coop", "budget": 1 << 20,
                      "cost_model": "cpu", "copy_cost": 0.1}
    for record in got[1:]:
        # a host trace has each kernel's allocation history; an output's alloc is a live
        # allocation of its size (which temporaries NumPy makes is NumPy's business)
        if record["op"] in ("call", "mutate"):
            allocs = record.pop("allocs")
            sizes = [n for n in allocs if n >= 0]
            freed = {~n for n in allocs if n < 0}
            for out in record.get("outputs", []):
                if out["alias"] < 0:
                    k = out.pop("alloc")
                    assert sizes[k] == out["size"] and k not in freed
    assert got[1:] == [
        {"op": "constant", "id": 0, "size": 48},
        {"op": "constant", "id": 1, "size": 48},
        {"op": "start"},
        call("matmul", [0, 1], [(2, 32, -1)], CPU.cost_ns(24.0, 128), "expensive"),
        call("transpose", [2], [(2, 0, 0)], CPU.cost_ns(0, 64), "cheap"),
        call("t_and_dec", [2], [(2, 0, 0), (3, 32, -1)], CPU.cost_ns(0, 96), "cheap"),
        {"op": "mutate", "name": "relu_", "inputs": [3], "mutated": [0],
         "cost": CPU.cost_ns(0, 64), "cls": "cheap"},
        call("add_scalar", [3], [(4, 32, -1)], CPU.cost_ns(0, 64), "cheap"),
        {"op": "release", "id": 4},
        {"op": "release", "id": 3},
        {"op": "release", "id": 2},
    ]
    assert rt.stats()["releases"] == 3


def defined_before_use(trace):
    """Every id a record reads was declared earlier (constant or call output); each id is
    released at most once and never read after its release."""
    known, released = set(), set()
    for record in trace:
        reads = record.get("inputs", [])
        if record["op"] == "release":
            reads = [record["id"]]
        if not set(reads) <= known - released:
            return False
        if record["op"] == "constant":
            known.add(record["id"])
        elif record["op"] == "call":
            known.update(o["id"] for o in record["outputs"])
        elif record["op"] == "release":
            released.add(record["id"])
    return True


@pytest.mark.parametrize("seed", [0, 3])
def test_a_trace_is_of_the_program_not_of_its_budget(tmp_path, seed):
    """The same program recorded at an unlimited budget and near the lower bound (with
    evictions and recomputes) gives the same trace, valid record by record."""
    graph = random_graph(seed)
    traces, recomputes = [], []
    for budget in (64 * MiB, int(1.35 * lower_bound(graph))):
        rt = coop.Runtime(coop.numpy_allocator(budget), cost="cpu")
        path = tmp_path / f"{budget}.jsonl"
        with rt.record(path):
            run_graph(rt, graph)
        traces.append(records(path))
        recomputes.append(rt.stats()["recomputes"])
    assert recomputes[0] == 0 < recomputes[1]
    assert [t[0]["budget"] for t in traces] == [64 * MiB, int(1.35 * lower_bound(graph)) // 64 * 64]
    assert traces[0][1:] == traces[1][1:]                     # all but the meta record
    assert defined_before_use(traces[0][1:])
    kinds = {r["op"] for r in traces[0]}
    assert kinds == {"meta", "constant", "call", "mutate", "release"}


# ---- the simulation backend ---------------------------------------------------------------------

def same(a, *others, **attrs):
    return a


# kernels that allocate exactly their outputs, so the host run has no temporaries either
SIM = {
    "matmul": coop.Kernel(lambda a, b: a @ b, name="matmul",
                          flops=lambda a, b: 2.0 * a[0][0] * a[0][1] * b[0][1],
                          shape=lambda a, b: ((a[0][0], b[0][1]), a[1])),
    "tanh": coop.Kernel(np.tanh, name="tanh", shape=same),
    "add": coop.Kernel(np.add, name="add", shape=same),
    "transpose": coop.Kernel(lambda a: a.T, name="transpose", views=0,
                             shape=lambda a: (a[0][::-1], a[1])),
    "tanh_": coop.Kernel(lambda a: np.tanh(a, out=a), name="tanh_", inplace=0, shape=same),
}


def sim_program(rt, inputs):
    """A chain of layers keeping every other output, then a sum of everything kept (which
    recomputes what was evicted). Returns the arena's pieces and counters after every op."""
    log = []

    def apply(name, *args):
        out = rt.apply(SIM[name], *args)
        log.append((rt.arena.pieces(), rt.arena.stats()["evictions"], rt.stats()["recomputes"]))
        return out

    ws = [rt.tensor(d) for d in inputs]
    h, keep = ws[0], []
    for i in range(12):
        h = apply("tanh", apply("matmul", h, ws[1 + i % 3]))
        if i % 4 == 3:
            apply("tanh_", h)
        if i % 2:
            keep.append(apply("add", h, apply("transpose", h)))
    total = keep[0]
    for k in keep[1:]:
        total = apply("add", total, k)
    stats = rt.stats()
    for key in SEARCH_TIMES:
        del stats[key]
    return log, stats


def test_the_simulator_decides_alike_twice_and_like_the_host_backend():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((32, 32)) for _ in range(4)]
    specs = [((32, 32), np.float64)] * 4
    for budget in (64 * 8192, 7 * 8192):
        def sim():
            return sim_program(coop.Runtime(coop.SimBackend(budget, alignment=64), cost="cpu"),
                               specs)
        first, second = sim(), sim()
        assert first == second
        host = sim_program(coop.Runtime(coop.numpy_allocator(budget), cost="cpu"), arrays)
        assert host == first
        stats = first[1]
        if budget == 7 * 8192:
            assert stats["evictions"] > 0 and stats["recomputes"] > 0
        else:
            assert stats["evictions"] == stats["recomputes"] == 0


def test_the_simulator_needs_shape_rules(tmp_path):
    rt = coop.Runtime(coop.SimBackend("1MiB"))
    path = tmp_path / "sim.jsonl"
    with rt.record(path):
        x = rt.tensor(((4, 4), np.float32))
        assert x.storage.nbytes == 64 and rt.arena.storage_info(x.storage.sid)["evictable"] is False
        with pytest.raises(TypeError, match="kernel 'add_scalar' has no shape rule"):
            rt.apply(ADDC, x, c=1.0)
    assert rt.pinned() == {}
    rt.arena.check()
    # the failed call is in the trace, without allocations (the simulator runs no kernel)
    assert records(path)[2] == {"op": "call", "name": "add_scalar", "inputs": [0],
                                "outputs": [], "cost": 0, "cls": "cheap", "failed": True}


class Boom(Exception):
    pass


def _double_then_raise(a):
    tmp = a * 2.0                  # 32 bytes, still held by the failure's traceback
    a += tmp
    raise Boom("the kernel failed")


def _add_then_raise(a, b):
    tmp = a + b
    raise Boom(f"the kernel failed after {tmp.nbytes} bytes")


@pytest.mark.parametrize("interrupt", [False, True])
def test_a_failed_kernel_is_recorded_and_replays_as_the_run_left_it(tmp_path, rt, interrupt):
    """A failed in-place kernel's record says failed: true, with its allocations; so does a
    failed call's (no outputs, no cost). Replayed, the storage the kernel wrote is a
    constant, as in the run, and its reader reads the old value."""
    error = KeyboardInterrupt if interrupt else Boom

    def fail(a, *rest):
        try:
            (_add_then_raise if rest else _double_then_raise)(a, *rest)
        except Boom:
            raise error("the kernel failed") from None

    path = tmp_path / "run.jsonl"
    with rt.record(path):
        x = rt.tensor(np.arange(4.0).reshape(2, 2))
        y = rt.apply(ADDC, x, c=1.0)                         # id 1
        z = rt.apply(ADDC, y, c=1.0)                         # id 2 reads y's value
        with pytest.raises(error, match="the kernel failed"):
            rt.apply(coop.Kernel(fail, name="fail_", inplace=0), y)
        with pytest.raises(error, match="the kernel failed"):
            rt.apply(coop.Kernel(fail, name="fail"), x, z)
        assert rt._engine.info(y._view.sid)["producer"] is None      # a constant now
        assert np.array_equal(y.numpy(), [[3.0, 6.0], [9.0, 12.0]])
        evict(rt, z)
        assert np.array_equal(z.numpy(), [[2.0, 3.0], [4.0, 5.0]])   # from y's old value
    got = records(path)
    for record in got[4:6]:
        # the kernel's temporary (which others NumPy makes is NumPy's business), left
        # allocated at the failure
        allocs = record.pop("allocs")
        sizes = [n for n in allocs if n >= 0]
        assert any(n == 32 and ~k not in allocs for k, n in enumerate(sizes)), allocs
    assert got[4] == {"op": "mutate", "name": "fail_", "inputs": [1], "mutated": [0],
                      "cost": 0, "cls": "cheap", "failed": True}
    assert got[5] == {"op": "call", "name": "fail", "inputs": [0, 2], "outputs": [],
                      "cost": 0, "cls": "cheap", "failed": True}
    from coop.trace._replay import Replayer
    program = coop.trace.load(path)
    assert [program.op_failed(t) for t in range(program.n_ops)] == [False, False, True, True]
    assert program.cost_first == got[2]["cost"] + got[3]["cost"]
    replayer = Replayer(program, coop.Arena(1 << 20, 64), "coop")
    replayer.run(0, 3)                                       # x, y, z
    engine = replayer.engine
    assert engine.info(replayer.storage_of(1))["producer"] is not None
    replayer.run(3, 4)                                       # the failed mutate
    assert engine.info(replayer.storage_of(1))["producer"] is None
    (old,) = engine.inputs(engine.info(replayer.storage_of(2))["producer"])
    assert old != replayer.storage_of(1)                     # z reads y's old value
    replayer.run(4)
    assert replayer.counters()["ops"] == rt.stats()["ops"] == 2
    engine.arena.check()
