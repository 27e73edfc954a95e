"""A pool, its runtime and their arrays collected together as a reference cycle: every piece
is freed into an arena the collector left intact. The arena and its parts are never cleared by
the garbage collector (Cython's no_gc_clear), nor are the owners whose deallocation frees into
it (the CuPy pool's PieceOwner, the NumPy handler's HostBackend): a cleared arena read by such a
free once crashed the process (an integer division by zero) at the end of a CuPy training run.

Each case runs in its own interpreter, so a regression fails one test instead of killing the run.
"""
import subprocess
import sys

import pytest

POOLS = {   # fake pointers for CuPy: the allocator path only, no kernel runs
    "cupy": 'pool = coop.allocator("1MiB", base=1 << 40)',
    "host": 'pool = coop.numpy_allocator("1MiB")',
}
PIECES = {  # anonymous pieces, made after the runtime (the order that crashed)
    "cupy": 'raw = [pool.malloc(1000 * (i + 1)) for i in range(20)]',
    "host": 'with pool:\n    raw = [np.empty(1000 * (i + 1), np.uint8) for i in range(20)]',
}

SCRIPT = """\
import gc
import numpy as np
import coop

# the arena collected with the rest (the order of this crashed the build before no_gc_clear)
{pool}
rt = coop.Runtime(pool, policy="coop", cost="cpu")   # the arena's owner: arena <-> engine
{pieces}
cycle = [pool, rt, raw]
cycle.append(cycle)
del pool, rt, raw, cycle
gc.collect()
print("collected")

# the arena kept alive: the frees of a collected pool and runtime land in it, intact
{pool}
rt = coop.Runtime(pool, policy="coop", cost="cpu")
{pieces}
tensors = []
if {tensors}:                       # kernels run on the host backend only
    a = rt.tensor(np.ones((64, 64), np.float32))
    b = rt.apply(coop.Kernel(lambda x, xp: x * 2.0, name="double"), a)
    c = rt.apply(coop.Kernel(lambda x, xp: x + 1.0, name="inc"), b)
    if {evict}:
        rt.evict(b)
    tensors = [a, b, c]
    del a, b, c
arena = pool.arena
before = arena.used_bytes
cycle = [pool, rt, tensors, raw]
cycle.append(cycle)
del pool, rt, tensors, raw, cycle
gc.collect()
arena.check()                       # every invariant, from scratch
print("used", before, arena.used_bytes)
"""


@pytest.mark.parametrize("kind, tensors, evict", [
    ("cupy", False, False), ("host", False, False), ("host", True, False), ("host", True, True)],
    ids=["cupy-pieces", "host-pieces", "host-tensors", "host-tensors-one-evicted"])
def test_a_collected_cycle_frees_every_piece_into_an_intact_arena(kind, tensors, evict, tmp_path):
    if kind == "cupy":
        pytest.importorskip("cupy")
    code = SCRIPT.format(pool=POOLS[kind], pieces=PIECES[kind], tensors=tensors,
                         evict=evict)
    # run outside the checkout: there `import coop` would find the source tree, not the build
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    words = run.stdout.split()
    assert words[0] == "collected", run.stdout
    assert words[1] == "used" and int(words[2]) > 0 and int(words[3]) == 0, run.stdout
