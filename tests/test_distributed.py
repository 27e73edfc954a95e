"""coop.distributed: gradient buckets in the arena, and data-parallel training of the GPT example
over 2 MPI ranks (``mpiexec -n 2``, the mpich wheel's) against one process with twice the batch."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import coop
from _scripts import EXAMPLES, load_example
from coop import distributed, models, nn, optim

try:
    from mpi4py import MPI
except (ImportError, RuntimeError) as err:   # mpi4py 4 raises RuntimeError with no MPI library
    pytest.skip(f'needs mpi4py and an MPI: pip install "coop[mpi]" ({err})',
                allow_module_level=True)


def mpiexec():
    """The mpiexec of the MPI mpi4py runs on: the mpich wheel's, beside this Python."""
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


def fake(shape, dtype=np.float32):
    """A stand-in for a tensor in bucket_layout, which reads shape, size and dtype only."""
    class Spec:
        pass
    s = Spec()
    s.shape, s.dtype, s.size = shape, np.dtype(dtype), int(np.prod(shape))
    return s


# ---- buckets ---------------------------------------------------------------------------------


def test_bucket_layout_splits_tensors_over_buckets_of_one_dtype():
    tensors = [fake((3,)), fake((5,)), fake((2,), np.float64), fake((4,))]
    layout = distributed.bucket_layout(tensors, bucket_bytes=16)   # 4 float32, 2 float64
    assert [(str(d), n, segs) for d, n, segs in layout] == [
        ("float32", 4, [(0, 0, 3, 0), (1, 0, 1, 3)]),
        ("float32", 4, [(1, 1, 5, 0)]),
        ("float64", 2, [(2, 0, 2, 0)]),
        ("float32", 4, [(3, 0, 4, 0)]),
    ]


def test_bucket_smaller_than_an_element_is_refused():
    with pytest.raises(ValueError, match="cannot hold one float64 element"):
        distributed.bucket_layout([fake((2,), np.float64)], bucket_bytes=7)


def _model_with_grads(budget="4MiB"):
    rt = coop.Runtime(coop.numpy_allocator(budget), cost="cpu")
    model = nn.Sequential(nn.Linear(rt, 16, 32, rng=0), nn.ReLU(), nn.Linear(rt, 32, 3, rng=1))
    x = rt.tensor(np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32))
    (model(x) * model(x)).sum().backward()
    del x
    return rt, model


def test_one_rank_average_leaves_gradients_bit_identical_and_frees_its_buckets():
    rt, model = _model_with_grads()
    params = model.parameters()
    before = [p.grad.numpy() for p in params]
    used = rt.arena.stats()["used_bytes"]
    out = distributed.allreduce_gradients(params, distributed.MPICommunicator(MPI.COMM_SELF),
                                          bucket_bytes=256)
    nbytes = sum(g.nbytes for g in before)
    assert out["bytes"] == nbytes and out["buckets"] == -(-nbytes // 256)
    for p, b in zip(params, before):
        assert p.grad.numpy().tobytes() == b.tobytes()
        assert p.grad.storage.op is None            # still a constant
    assert rt.arena.stats()["used_bytes"] == used   # every bucket freed
    rt.arena.check()


def test_buckets_are_allocated_in_the_arena_under_its_budget():
    # after backward nothing is evictable (parameters, gradients, a constant filling the arena's
    # largest free range but for 1 KiB): a bucket larger than the largest free range does not
    # fit, one that fits does
    rt, model = _model_with_grads()
    params = model.parameters()
    filler = rt.tensor(np.zeros(rt.arena.stats()["largest_free"] - 1024, np.uint8))
    largest = rt.arena.stats()["largest_free"]
    assert 1024 <= largest < 2048
    comm = distributed.MPICommunicator(MPI.COMM_SELF)
    before = [p.grad.numpy() for p in params]
    with pytest.raises(coop.OutOfMemoryError, match=f"cannot allocate {largest + 64} bytes"):
        distributed.allreduce_gradients(params, comm, bucket_bytes=largest + 64)
    rt.arena.check()
    for p, b in zip(params, before):
        assert p.grad.numpy().tobytes() == b.tobytes()
    used = rt.arena.stats()["used_bytes"]
    out = distributed.allreduce_gradients(params, comm, bucket_bytes=largest)
    assert out["buckets"] > 1
    assert rt.stats()["peak_used_bytes"] >= used + largest    # a full bucket was in the arena
    assert rt.arena.stats()["used_bytes"] == used
    rt.arena.check()
    del filler


def test_buffers_are_rank_zeros_after_each_sync():
    """A model with BatchNorm: its running statistics are buffers, which each rank's batch
    moves; DataParallel broadcasts rank 0's at each sync and checks them with the parameters
    (one rank here: the broadcast leaves them bit for bit)."""
    rt = coop.Runtime(coop.numpy_allocator("8MiB"), cost="cpu")
    model = nn.Sequential(nn.Conv2d(rt, 3, 4, 3, padding=1, rng=0), nn.BatchNorm2d(rt, 4))
    dp = distributed.DataParallel(model, distributed.MPICommunicator(MPI.COMM_SELF),
                                  bucket_bytes=64)
    assert len(dp.buffers) == 2 and all(b.shape == (4,) for b in dp.buffers)
    x = rt.tensor(np.random.default_rng(0).normal(size=(2, 3, 5, 5)).astype(np.float32))
    model(x).sum().backward()
    moved = [b.numpy() for b in dp.buffers]
    assert not np.array_equal(moved[0], np.zeros(4, np.float32))   # the batch moved them
    out = dp.sync_gradients()
    assert out["buckets"] > 0
    assert all(np.array_equal(b.numpy(), m) for b, m in zip(dp.buffers, moved))
    dp.check_identical()
    assert dp.checks == 1
    rt.arena.check()


def test_gradients_of_two_runtimes_are_refused():
    _, a = _model_with_grads()
    _, b = _model_with_grads()
    with pytest.raises(ValueError, match="different runtimes"):
        distributed.allreduce_gradients(a.parameters() + b.parameters(),
                                        distributed.MPICommunicator(MPI.COMM_SELF))


def test_a_simulation_backend_is_refused():
    rt = coop.Runtime(coop.SimBackend("1GiB"))
    model = models.MLP(rt, [4, 4])
    with pytest.raises(TypeError, match="simulation backend"):
        distributed.DataParallel(model, distributed.MPICommunicator(MPI.COMM_SELF))


def test_mpi_takes_host_arrays_and_init_names_its_backends():
    comm = distributed.MPICommunicator(MPI.COMM_SELF)
    with pytest.raises(TypeError, match="host \\(NumPy\\) arrays, got list.*init\\('nccl'\\)"):
        comm.allreduce_([1.0])
    with pytest.raises(ValueError, match="backend must be 'mpi' or 'nccl', got 'gloo'"):
        distributed.init("gloo")


@pytest.mark.parametrize("other, message", [
    (lambda mine: (mine[0][:-1], mine[1]), r"the ranks' models differ: parameters per rank "
                                            r"\[6, 5\]; every rank must build the same model"),
    (lambda mine: ([((32, 4), "float32")] + mine[0][1:], mine[1]),
     r"the ranks' models differ: parameter 0 is \(3, 32\) float32, \(32, 4\) float32 on "
     r"ranks 0..1; every rank must build the same model"),
])
def test_data_parallel_refuses_ranks_with_different_models(other, message):
    """Every rank checks the others' parameter shapes and dtypes before the first broadcast,
    which a rank with another model would fail in alone while the rest waited forever."""
    rt = coop.Runtime(coop.numpy_allocator("8MiB"), cost="cpu")
    model = models.MLP(rt, [3, 32, 16, 4])

    class TwoRanks(distributed.MPICommunicator):
        def allgather(self, value):
            return [value, other(value)]

    with pytest.raises(ValueError, match=message):
        distributed.DataParallel(model, TwoRanks(MPI.COMM_SELF))
    for bad in (0, -5, "1MiB", 1.5):
        with pytest.raises(ValueError, match=f"bucket_bytes must be an int >= 1, got "
                                             f"{re.escape(repr(bad))}"):
            distributed.DataParallel(model, distributed.MPICommunicator(MPI.COMM_SELF),
                                     bucket_bytes=bad)
    with pytest.raises(TypeError, match="DataParallel needs a communicator"):
        distributed.DataParallel(model, None)


def test_check_identical_names_the_differing_parameter():
    # one rank: compare against a tampered copy of the digests, as a second rank would send
    rt, model = _model_with_grads()
    params = model.parameters()

    class TwoRanks(distributed.MPICommunicator):
        def allgather(self, value):
            other = list(value)
            other[2] = "0" * 64
            return [value, other]

    comm = TwoRanks(MPI.COMM_SELF)
    with pytest.raises(RuntimeError, match=r"parameter 2 \(shape \(32, 3\)\) differs"):
        distributed.check_identical(params, comm)


# ---- 2 ranks vs one process with twice the batch ---------------------------------------------

DRIVER = """
import importlib.util, json, sys
import numpy as np
from coop import distributed
path, out, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
spec = importlib.util.spec_from_file_location("train_gpt", path)
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
run = example.main(argv)
dp = run["dp"]
digests = dp.comm.allgather(distributed.parameter_digests(dp.params))
# one more backward on a batch of this rank's own: the averaged gradients must be exactly
# (g0 + g1) / 2 in float32, computed here from every rank's gradients
x = np.random.default_rng(100 + dp.rank).integers(0, 96, (2, 32))
run["model"].loss(x, x).backward()
every = dp.comm.allgather([p.grad.numpy() for p in dp.params])
dp.sync_gradients()
exact = all(p.grad.numpy().tobytes() == ((a + b) / np.float32(2)).tobytes()
            for p, a, b in zip(dp.params, *every))
differed = any(a.tobytes() != b.tobytes() for a, b in zip(*every))
if dp.rank == 0:
    np.savez(out + ".npz", losses=np.array(run["losses"]),
             **{"p_" + k: v for k, v in run["model"].state_dict().items()})
    with open(out + ".json", "w") as f:
        json.dump(dict(ranks=run["ranks"], digests=digests, exact=exact, differed=differed), f)
"""

GPT = ["--budget", "0.7x", "--steps", "5", "--layers", "2", "--d-model", "32", "--block", "32",
       "--eval-batches", "1", "--log-every", "0", "--backend", "numpy", "--no-progress"]
BATCH = 8   # per rank; the single process takes 2 x 8


def two_ranks(tmp_path, source, *args, timeout):
    """Run the Python source as 2 MPI ranks (mpiexec -n 2) with args; asserts it exits 0."""
    launcher = mpiexec()
    if launcher is None:
        pytest.skip('no mpiexec: pip install "coop[mpi]" (the mpich wheel brings one)')
    driver = tmp_path / "driver.py"
    driver.write_text(source)
    env = dict(os.environ)
    # as the example itself sets, but before the driver imports NumPy: one BLAS thread a rank
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    # the ranks import the coop this test imported (the source tree or the installed package)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(coop.__file__)), env.get("PYTHONPATH", "")])
    done = subprocess.run([launcher, "-n", "2", sys.executable, str(driver), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_two_ranks_train_as_one_process_with_twice_the_batch(tmp_path):
    out = str(tmp_path / "ranks")
    two_ranks(tmp_path, DRIVER, os.path.join(EXAMPLES, "train_gpt.py"), out, *GPT, "--batch",
              str(BATCH), "--bucket-bytes", "8KiB", "--distributed", "--check-identical",
              "--out", str(tmp_path / "png2"), timeout=600)
    ranks = np.load(out + ".npz")
    meta = json.loads((tmp_path / "ranks.json").read_text())

    one = load_example("train_gpt").main(GPT + ["--batch", str(2 * BATCH),
                                                 "--out", str(tmp_path / "png1")])

    # bit-identical parameters across ranks: checked after each of the 5 steps, and at the end
    assert meta["digests"][0] == meta["digests"][1]
    # the gradients averaged exactly: (g0 + g1) / 2, from ranks whose gradients differed
    assert meta["differed"] and meta["exact"]
    params = one["model"].num_parameters()
    for rank in meta["ranks"]:
        assert rank["identical_checks"] == 5
        assert rank["peak_used_bytes"] <= rank["budget"]       # each rank's budget held
        assert rank["evictions"] > 0 and rank["recomputes"] > 0
        assert rank["reduced_bytes"] == 5 * 4 * params      # every float32 gradient, each step

    # the same run as one process with batch 16, up to float32 summation order: the per-rank
    # mean losses averaged vs one mean over 16 sequences, and gradients summed over 8 + 8 rows
    # vs over 16. float32's unit roundoff is 6e-8: a loss near 4 moves by ulps (measured: 1 ulp,
    # 4.8e-7); a gradient moves relative to the terms it sums, and AdamW, which divides by
    # sqrt(v), turns a gradient that is rounding noise (the key bias's: softmax ignores it) into
    # steps of its own: parameters measured 5.3e-6 apart at most, the step size lr is 3e-3)
    losses = np.array(one["losses"])
    np.testing.assert_allclose(ranks["losses"], losses, rtol=1e-5, atol=0)
    state = one["model"].state_dict()
    for name, value in state.items():
        np.testing.assert_allclose(ranks["p_" + name], value, rtol=0, atol=3e-5, err_msg=name)
    # and not trivially: the 2 ranks' parameters differ from one process trained on batch 8
    half = load_example("train_gpt").main(GPT + ["--batch", str(BATCH),
                                                  "--out", str(tmp_path / "png3")])
    assert max(np.abs(ranks["p_" + k] - v).max()
               for k, v in half["model"].state_dict().items()) > 1e-3


UNEVEN = """
import json, sys
import numpy as np
import coop
from coop import distributed, nn
comm = distributed.init("mpi")
rt = coop.Runtime(coop.numpy_allocator("4MiB"), cost="cpu")
model = nn.Sequential(nn.Linear(rt, 16, 32, rng=0), nn.ReLU(), nn.Linear(rt, 32, 3, rng=1))
dp = distributed.DataParallel(model, comm, bucket_bytes=256)
x = rt.tensor(np.random.default_rng(comm.rank).normal(size=(8, 16)).astype(np.float32))
first, second = model.parameters()[:2], model.parameters()[2:]
flags = []
for step in ("all on rank 0, none on rank 1", "rank 1 reaches the first layer only"):
    for p in model.parameters():
        p.grad = None
    if comm.rank == 0:
        model(x).sum().backward()
    elif step.startswith("rank 1 reaches"):
        (model[0](x) * model[0](x)).sum().backward()
    mine = [None if p.grad is None else p.grad.numpy() for p in model.parameters()]
    every = comm.allgather(mine)
    dp.sync_gradients()
    want = [sum(g for g in col if g is not None) / np.float32(2) for col in zip(*every)]
    flags.append(all(p.grad.numpy().tobytes() == w.astype(np.float32).tobytes()
                     for p, w in zip(model.parameters(), want)))
rt.arena.check()
if comm.rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(dict(exact=flags, syncs=dp.syncs), f)
"""


def test_ranks_with_gradients_for_different_parameters_average_them_without_waiting(tmp_path):
    # a rank that skips backward, or whose graph misses a layer, reduces zeros for them:
    # every rank enters the same buckets, and each gradient is the sum over ranks / 2
    out = tmp_path / "uneven.json"
    two_ranks(tmp_path, UNEVEN, str(out), timeout=120)
    assert json.loads(out.read_text()) == {"exact": [True, True], "syncs": 2}


def test_agreeing_on_gradients_refuses_ranks_with_different_parameter_counts():
    _, model = _model_with_grads()

    class TwoRanks(distributed.MPICommunicator):
        def allgather(self, value):
            return [value, value[:-1]]

    comm = TwoRanks(MPI.COMM_SELF)
    comm.size = 2
    with pytest.raises(ValueError, match=r"different numbers of parameters \(4, 3 by rank\)"):
        distributed.allreduce_gradients(model.parameters(), comm)


# ---- GPUs: NCCL through CuPy ------------------------------------------------------------------


@pytest.mark.cuda
def test_nccl_one_rank_average_leaves_gradients_bit_identical():
    import cupy
    comm = distributed.init("nccl")
    if comm.size != 1:
        pytest.skip("run outside mpiexec (one rank)")
    rt = coop.Runtime(coop.allocator("256MiB"))
    model = models.GPT(rt, 20, 8, 1, 2, 16, rng=0)
    dp = distributed.DataParallel(model, comm, bucket_bytes=4096)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    x = np.random.default_rng(0).integers(0, 20, (2, 8))
    model.loss(x, x).backward()
    before = [p.grad.numpy() for p in dp.params]
    dp.sync_gradients()
    cupy.cuda.get_current_stream().synchronize()
    for p, b in zip(dp.params, before):
        assert p.grad.numpy().tobytes() == b.tobytes()
    opt.step()
    dp.check_identical()
    rt.arena.check()


def test_the_training_docs_data_parallel_block_runs_as_written(tmp_path):
    """docs/training.md's data-parallel block, run as written in one process (one rank)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "DataParallel" in b)
    script = tmp_path / "train.py"
    script.write_text(block)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
