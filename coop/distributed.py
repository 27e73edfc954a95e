"""Data-parallel training over several processes, each with its own runtime and budget.

Every process (rank) builds the same model on its own Runtime, under its own budget, on its own
device, and runs forward and backward on its own shard of each batch. After backward,
``DataParallel.sync_gradients()`` averages the gradients over the ranks, so the optimizer step,
identical on every rank, keeps the parameters identical. The averaging goes through buckets
that are storages in the arena, so the budget covers them:

1. a bucket: a flat constant of at most ``bucket_bytes`` (one dtype), allocated by the runtime
   (it may evict to make room, like any allocation);
2. pack: an in-place kernel copies a run of gradient elements into it;
3. all-reduce (sum) in place on the bucket's own memory, then divide by the number of ranks;
4. unpack: one in-place kernel per gradient copies its elements back (the runtime's in-place
   path: a gradient is a constant and stays one);
5. the bucket is dropped, its memory freed, before the next bucket is allocated.

So the memory the averaging adds is one bucket at a time (with the policies that copy an
in-place op's old value first, dtr's family, two). The communication itself is not a kernel:
it is never recomputed (a bucket is a constant, never evicted; under an offloading policy it
may be copied out ahead, and the engine drops that copy when the borrow that the
communication wrote through ends: Tensor.borrow).

Transports: MPI through mpi4py for host (NumPy) arenas (``pip install "coop[mpi]"``, which
brings the ``mpich`` wheel and its ``mpiexec``), and NCCL through CuPy
(``cupyx.distributed.NCCLBackend``, set up over MPI) for CuPy arenas, one GPU per rank.
Launch with ``mpiexec -n 2 python train.py``.
"""
import hashlib
import time

from coop._checks import check_int
from coop.kernel import Kernel
from coop.nn.module import make_buffer

#: default bucket size: large enough that a small model needs a few buckets, small enough to
#: fit beside a tight budget's constants
DEFAULT_BUCKET_BYTES = 1 << 20


def _pack(bucket, *grads, layout):
    """bucket[offset:offset + stop - start] = grad.flat[start:stop] for each grad."""
    for grad, (start, stop, offset) in zip(grads, layout):
        bucket[offset:offset + stop - start] = grad.reshape(-1)[start:stop]


def _unpack(grad, bucket, start, stop, offset):
    """grad.flat[start:stop] = bucket[offset:offset + stop - start]."""
    values = bucket[offset:offset + stop - start]
    if grad.flags.c_contiguous:
        grad.reshape(-1)[start:stop] = values      # a view: writes land in grad
    else:
        flat = grad.reshape(-1)                     # a copy (in the arena, inside the kernel)
        flat[start:stop] = values
        grad[...] = flat.reshape(grad.shape)


def _copy_bytes(*specs, **attrs):
    return 0.0


PACK = Kernel(_pack, name="bucket_pack_", inplace=0, flops=_copy_bytes)
UNPACK = Kernel(_unpack, name="bucket_unpack_", inplace=0, flops=_copy_bytes)


# ---- communicators -------------------------------------------------------------------------


class MPICommunicator:
    """The ranks of an mpi4py communicator; collectives on host (NumPy) arrays in place."""

    def __init__(self, comm=None):
        from mpi4py import MPI
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def _host(self, array):
        if not hasattr(array, "__array_interface__"):
            raise TypeError(f"MPI here moves host (NumPy) arrays, got {type(array).__name__}; "
                            "for a CuPy arena use coop.distributed.init('nccl')")
        return array

    def allreduce_(self, array):
        """array = the sum of every rank's array, in place."""
        self.comm.Allreduce(self._mpi.IN_PLACE, self._host(array), op=self._mpi.SUM)

    def broadcast_(self, array, root=0):
        """array = root's array, in place."""
        self.comm.Bcast(self._host(array), root=root)

    def allgather(self, value):
        """Every rank's (small, picklable) value, in rank order."""
        return self.comm.allgather(value)

    def mean(self, value):
        """The mean over the ranks of a Python float."""
        return self.comm.allreduce(float(value), op=self._mpi.SUM) / self.size

    def barrier(self):
        """Wait until every rank reaches this call."""
        self.comm.Barrier()


class NCCLCommunicator(MPICommunicator):
    """One GPU per rank: NCCL (cupyx.distributed.NCCLBackend) moves device arrays; MPI sets it
    up and carries small Python values. Selects the device (local rank modulo the devices on
    the node): create it before the rank's CuPy arena. Unmeasured: no GPU where it was written."""

    def __init__(self, comm=None):
        super().__init__(comm)
        import cupy
        from cupyx.distributed import NCCLBackend
        if self.comm.Get_size() != self._mpi.COMM_WORLD.Get_size():
            raise ValueError("cupyx.distributed.NCCLBackend sets up over MPI.COMM_WORLD; "
                             "pass COMM_WORLD (or nothing)")
        if not cupy.cuda.nccl.available:
            # every rank finds the same: all raise (one rank alone failing leaves the others
            # waiting in NCCLBackend's setup for good)
            raise RuntimeError("coop: CuPy finds no NCCL library on this rank "
                               "(cupy.cuda.nccl.available is False); install it (pip install "
                               "nvidia-nccl-cu12) or train on the host: init('mpi')")
        local = self.comm.Split_type(self._mpi.COMM_TYPE_SHARED)
        ranks, devices = local.Get_size(), cupy.cuda.runtime.getDeviceCount()
        self.device_id = local.Get_rank() % max(devices, 1)
        local.Free()
        if ranks > devices:
            raise ValueError(f"coop: {ranks} ranks on this node but {devices} GPUs visible: "
                             f"NCCL takes one GPU per rank (two ranks on one GPU fail in its "
                             f"setup); start at most {devices} ranks per node")
        cupy.cuda.Device(self.device_id).use()
        self.nccl = NCCLBackend(self.size, self.rank, use_mpi=True)

    def allreduce_(self, array):
        self.nccl.all_reduce(array, array, "sum")

    def broadcast_(self, array, root=0):
        self.nccl.broadcast(array, root)


def init(backend="mpi"):
    """A communicator over every process mpiexec started: "mpi" (host arrays) or "nccl"
    (CuPy arrays, one GPU per rank; it selects this rank's device)."""
    try:
        if backend == "mpi":
            return MPICommunicator()
        if backend == "nccl":
            return NCCLCommunicator()
    except ModuleNotFoundError as err:
        if err.name != "mpi4py":
            raise
        raise ModuleNotFoundError('coop.distributed needs mpi4py and an MPI: '
                                  'pip install "coop[mpi]"', name="mpi4py") from err
    raise ValueError(f"backend must be 'mpi' or 'nccl', got {backend!r}")


# ---- buckets -------------------------------------------------------------------------------


def bucket_layout(tensors, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Buckets for tensors (in order): a list of (dtype, elements, [(tensor index, start, stop,
    offset)]). Each bucket holds one dtype and at most bucket_bytes; a tensor larger than that
    is split over several buckets."""
    bucket_bytes = int(bucket_bytes)
    buckets = []
    current = {}     # dtype -> the bucket being filled
    for i, t in enumerate(tensors):
        itemsize = t.dtype.itemsize
        capacity = bucket_bytes // itemsize
        if capacity < 1:
            raise ValueError(f"bucket_bytes={bucket_bytes} cannot hold one {t.dtype} element "
                             f"({itemsize} bytes); give at least {itemsize}")
        start, size = 0, t.size
        while start < size:
            bucket = current.get(t.dtype)
            if bucket is None or bucket[1] == capacity:
                bucket = [t.dtype, 0, []]
                buckets.append(bucket)
                current[t.dtype] = bucket
            stop = min(size, start + capacity - bucket[1])
            bucket[2].append((i, start, stop, bucket[1]))
            bucket[1] += stop - start
            start = stop
    return [tuple(b) for b in buckets]


def _through_buckets(runtime, tensors, bucket_bytes, communicate, write_back):
    """Pack each bucket of tensors, communicate(bucket array) in place, unpack into tensors
    where write_back; one bucket lives at a time. Returns (buckets, bytes, seconds)."""
    apply = runtime.apply
    nbytes = 0
    clock = _Clock(runtime.xp)
    layout = bucket_layout(tensors, bucket_bytes)
    for dtype, elements, segments in layout:
        bucket = make_buffer(runtime, (elements,), dtype, 0)
        apply(PACK, bucket, *[tensors[i] for i, _, _, _ in segments],
              layout=tuple((start, stop, offset) for _, start, stop, offset in segments))
        with bucket.borrow() as memory:
            clock.start()
            communicate(memory)
            clock.stop()
            del memory      # an array held past the block would keep the bucket's memory
        if write_back:
            for i, start, stop, offset in segments:
                apply(UNPACK, tensors[i], bucket, start=start, stop=stop, offset=offset)
        nbytes += elements * dtype.itemsize
        del bucket      # freed now: the next bucket takes its place
    return len(layout), nbytes, clock.seconds()


class _Clock:
    """Seconds spent communicating. MPI's calls return when done: host time. NCCL's only
    enqueue on the current stream: CUDA events around each call, read once at the end (one
    synchronize for all the buckets, none between them)."""

    def __init__(self, xp):
        import numpy
        self._events = None if xp is numpy else xp.cuda.Event
        self._pairs = []
        self._host = 0.0

    def start(self):
        if self._events is None:
            self._t0 = time.perf_counter()
        else:
            self._pairs.append((self._events(), self._events()))
            self._pairs[-1][0].record()

    def stop(self):
        if self._events is None:
            self._host += time.perf_counter() - self._t0
        else:
            self._pairs[-1][1].record()

    def seconds(self):
        if self._events is None:
            return self._host
        if not self._pairs:
            return 0.0
        self._pairs[-1][1].synchronize()
        import cupy
        return sum(cupy.cuda.get_elapsed_time(a, b) for a, b in self._pairs) / 1e3


def _runtime_of(tensors):
    if not tensors:
        raise ValueError("no tensors to synchronise")
    runtime = tensors[0].runtime
    if any(t.runtime is not runtime for t in tensors):
        raise ValueError("the tensors belong to different runtimes; synchronise each "
                         "runtime's apart")
    if runtime.xp is None:
        raise TypeError("a simulation backend holds no values to communicate; data parallel "
                        "training needs a NumPy or CuPy arena")
    return runtime


def allreduce_gradients(params, comm, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Average the ``.grad`` of params over comm's ranks, in place, through arena buckets of
    at most bucket_bytes. With more than one rank, the ranks first agree (one ``allgather`` of
    a flag per parameter) on the parameters that have a gradient on any rank: a rank where
    one of them has none (its graph did not reach it, or it skipped ``backward()``) gives it
    a zero gradient, so every rank reduces the same buckets (as PyTorch's
    DistributedDataParallel with unused parameters) and none waits alone in a collective the
    others never enter. Parameters without a gradient on every rank are skipped. Returns
    {buckets, bytes, seconds}."""
    params = list(params)
    if comm.size > 1:
        _agree_on_gradients(params, comm)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return dict(buckets=0, bytes=0, seconds=0.0)
    size = comm.size

    def reduce(memory):
        comm.allreduce_(memory)
        memory /= size

    buckets, nbytes, seconds = _through_buckets(_runtime_of(grads), grads, bucket_bytes,
                                                reduce, True)
    return dict(buckets=buckets, bytes=nbytes, seconds=seconds)


def _agree_on_gradients(params, comm):
    """Every parameter that has a gradient on some rank gets one here: zeros where it has
    none (each rank then holds gradients for the same parameters)."""
    if not hasattr(comm, "allgather"):
        raise TypeError(f"averaging gradients over {comm.size} ranks needs a communicator with "
                        f"allgather (coop.distributed.init()), got {type(comm).__name__}")
    mine = [p.grad is not None for p in params]
    every = comm.allgather(mine)
    if any(len(flags) != len(params) for flags in every):
        raise ValueError(f"the ranks average the gradients of different numbers of parameters "
                         f"({', '.join(str(len(flags)) for flags in every)} by rank); pass "
                         f"every rank's parameters in the same order")
    for k, p in enumerate(params):
        if not mine[k] and any(flags[k] for flags in every):
            p.grad = make_buffer(p.runtime, p.shape, p.dtype, 0)


def broadcast_parameters(params, comm, root=0, bucket_bytes=DEFAULT_BUCKET_BYTES):
    """Every rank's params = root's, in place (through arena buckets, as the gradients)."""
    params = list(params)
    _through_buckets(_runtime_of(params), params, bucket_bytes,
                     lambda memory: comm.broadcast_(memory, root), comm.rank != root)


def parameter_digests(params):
    """A SHA-256 of each parameter's bytes (host copies, made outside the arena)."""
    return [hashlib.sha256(p.numpy().tobytes()).hexdigest() for p in params]


def check_identical(params, comm):
    """Raise RuntimeError naming the first parameter whose bytes differ between ranks."""
    params = list(params)
    everyone = comm.allgather(parameter_digests(params))
    for k in range(len(params)):
        digests = [d[k] for d in everyone]
        if len(set(digests)) > 1:
            raise RuntimeError(f"parameter {k} (shape {params[k].shape}) differs between ranks: "
                               f"sha256 {', '.join(d[:12] for d in digests)} on ranks "
                               f"0..{comm.size - 1}")


def check_layout(params, buffers, comm):
    """Raise ValueError, on every rank, unless every rank holds parameters and buffers of the
    same count, shapes and dtypes (one allgather): a rank with another model would otherwise
    fail alone in the first broadcast while the others wait in it forever."""
    mine = ([(tuple(p.shape), str(p.dtype)) for p in params],
            [(tuple(b.shape), str(b.dtype)) for b in buffers])
    everyone = comm.allgather(mine)
    for what, k in (("parameters", 0), ("buffers", 1)):
        lists = [e[k] for e in everyone]
        if all(x == lists[0] for x in lists):
            continue
        counts = [len(x) for x in lists]
        if len(set(counts)) > 1:
            raise ValueError(f"the ranks' models differ: {what} per rank {counts}; every rank "
                             f"must build the same model")
        i = next(i for i in range(counts[0]) if len({tuple(x[i]) for x in lists}) > 1)
        raise ValueError(f"the ranks' models differ: {what[:-1]} {i} is "
                         f"{', '.join(f'{x[i][0]} {x[i][1]}' for x in lists)} on ranks "
                         f"0..{len(lists) - 1}; every rank must build the same model")


class DataParallel:
    """One rank's side of data-parallel training of a model (or a list of parameters).

    On creation, every rank takes rank 0's parameters and buffers. After each backward, call
    ``sync_gradients()``; then the optimizer's step is the same on every rank, and the buffers
    (BatchNorm's running statistics, which each rank's batch moves) are rank 0's.
    ``check_identical()`` (a debug check, after a step) compares the parameters' and buffers'
    hashes."""

    def __init__(self, model, comm, bucket_bytes=DEFAULT_BUCKET_BYTES):
        params = model.parameters() if hasattr(model, "parameters") else model
        self.params = list(params)
        # a model's buffers (BatchNorm's running statistics) move with each rank's own batch:
        # rank 0's are every rank's after each sync, as PyTorch's DistributedDataParallel
        # broadcasts them
        self.buffers = [b for _, b in model.named_buffers()] \
            if hasattr(model, "named_buffers") else []
        _runtime_of(self.params)
        if not all(hasattr(comm, name) for name in ("rank", "size", "allgather")):
            raise TypeError(f"DataParallel needs a communicator (coop.distributed.init()), got "
                            f"{type(comm).__name__}")
        self.comm = comm
        self.bucket_bytes = check_int("bucket_bytes", bucket_bytes, 1)
        check_layout(self.params, self.buffers, comm)
        self.checks = 0
        self.syncs = 0
        self.buckets = 0
        self.bytes = 0
        self.seconds = 0.0
        broadcast_parameters(self.params + self.buffers, comm, bucket_bytes=self.bucket_bytes)

    @property
    def rank(self):
        """This process's rank."""
        return self.comm.rank

    @property
    def size(self):
        """How many ranks train together."""
        return self.comm.size

    def sync_gradients(self):
        """Average the gradients over the ranks (call after backward, before the step); the
        buffers become rank 0's. A parameter with a gradient on some ranks only gets a zero
        one on the others first (allreduce_gradients), so a rank that skipped backward, or
        whose graph missed a layer, still takes part."""
        out = allreduce_gradients(self.params, self.comm, self.bucket_bytes)
        if self.buffers:
            broadcast_parameters(self.buffers, self.comm, bucket_bytes=self.bucket_bytes)
        self.syncs += 1
        self.buckets += out["buckets"]
        self.bytes += out["bytes"]
        self.seconds += out["seconds"]
        return out

    def check_identical(self):
        """Raise RuntimeError if a parameter's or buffer's bytes differ between ranks."""
        check_identical(self.params + self.buffers, self.comm)
        self.checks += 1

    def mean(self, value):
        """The mean of a float over the ranks (a loss, for logging)."""
        return self.comm.mean(value) if self.comm.size > 1 else float(value)

    def stats(self):
        """This rank's communication figures: syncs, buckets, bytes reduced, seconds, checks."""
        return dict(rank=self.rank, size=self.size, syncs=self.syncs, buckets=self.buckets,
                    bytes=self.bytes, comm_seconds=self.seconds, checks=self.checks)
