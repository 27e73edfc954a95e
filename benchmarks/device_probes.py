"""GPU-only behaviour of the CuPy backend, one line per probe (PASS / FAIL / INFO); run by
benchmarks/device_check.sh. Exit status 1 if any probe fails, 3 without a CUDA device.

Probes: the error of a reservation the device cannot hold and a percentage budget of free
memory; memory freed on one stream reused on another while a slow kernel still writes it
(explicit streams, and per-thread default streams in a subprocess); the default cost model and
cost="timing" (CUDA events) and its overhead against the cost model; dropout through coop recomputed bit for bit after an eviction;
training steps (a small GPT, a convolution with pooling) under a budget whose ops never
synchronize the device (cupyx.allow_synchronize(False));
the embedding backward with repeated indices run twice and against NumPy; the host link
(pinned host memory to and from the device on a non-blocking stream: bytes back unchanged, the
rates each way beside the cost model's); the host tier (256 MiB through the bound pool's
to_host and from_host: bytes back unchanged, the rates each way beside the cost model's and the
plain link's); a runtime used on another device (with two or more devices).

Run: python benchmarks/device_probes.py [--out DIR] [--only NAME,...]   (writes DIR/probes.json)
"""
import argparse
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import cupy
import coop
from coop import ops
from coop.backends import cupy as backend

results = {}


def report(name, ok, detail):
    results[name] = {"ok": ok, "detail": detail}
    print(f"{'PASS' if ok else ('INFO' if ok is None else 'FAIL')} {name}: {detail}", flush=True)


def reservation():
    free = cupy.cuda.runtime.memGetInfo()[0]
    try:
        with coop.allocator("100TiB"):
            cupy.empty(10)
        report("reserve_too_large", False, "no error")
    except Exception as err:  # noqa: BLE001 - the type is what is checked
        report("reserve_too_large", isinstance(err, backend.CupyOutOfMemoryError)
               and isinstance(err, cupy.cuda.memory.OutOfMemoryError) and 0 < err.free <= free,
               f"{type(err).__name__}: {str(err)[:160]}")
    pool = coop.allocator("90%")
    with pool:
        cupy.empty(10)
    total = pool.total_bytes()
    pool.free_all_blocks()
    report("percent_of_free", abs(total - 0.9 * free) <= 0.01 * free and pool.total_bytes() == 0,
           f"'90%' reserved {total >> 20} MiB of {free >> 20} MiB free, released after")


SLOW = r'''
extern "C" __global__ void slow_fill(float* p, int n, float v, long long spin) {
    long long t0 = clock64(); while (clock64() - t0 < spin) {}
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = v; }
'''


def streams():
    """A piece freed on stream 1 while a slow kernel still writes it, then allocated on stream 2
    and zeroed there: stream 2 must wait (else the late kernel's 7s overwrite the zeros)."""
    slow = cupy.RawKernel(SLOW, "slow_fill")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    n = 1 << 20
    pool = coop.allocator("256MiB")
    s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    with pool:
        with s1:
            x = cupy.empty(n, dtype=cupy.float32)
            ptr = x.data.ptr
            slow((sms,), (256,), (x, cupy.int32(n), cupy.float32(7.0), cupy.int64(1_000_000_000)))
            del x
        with s2:
            y = cupy.zeros(n, dtype=cupy.float32)
        cupy.cuda.Device().synchronize()
        same, top = y.data.ptr == ptr, float(y.max().get())
    report("stream_reuse_waits", (top == 0.0) if same else None,
           f"same memory {same}; max of the zeroed array after both streams: {top}")


PTDS = textwrap.dedent("""
    import sys, threading, cupy, coop
    slow = cupy.RawKernel(sys.argv[1], "slow_fill")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    pool = coop.allocator("256MiB")
    cupy.cuda.set_allocator(pool)
    n = 1 << 20
    freed, done, out = threading.Event(), threading.Event(), {}
    def a():
        x = cupy.empty(n, dtype=cupy.float32)
        out["a"] = x.data.ptr
        slow((sms,), (256,), (x, cupy.int32(n), cupy.float32(7.0), cupy.int64(1_000_000_000)))
        del x
        freed.set(); done.wait()
    def b():
        freed.wait()
        y = cupy.zeros(n, dtype=cupy.float32)
        out["b"] = y.data.ptr
        cupy.cuda.Device().synchronize()
        out["max"] = float(y.max().get())
        done.set()
    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start(); tb.start(); ta.join(); tb.join()
    print(out["a"] == out["b"], out["max"])
""")


def per_thread_streams():
    env = dict(os.environ, CUPY_CUDA_PER_THREAD_DEFAULT_STREAM="1")
    run = subprocess.run([sys.executable, "-c", PTDS, SLOW], env=env, capture_output=True,
                         text=True, timeout=120)
    if run.returncode:
        report("per_thread_streams_wait", False, run.stderr.strip()[-300:])
        return
    same, top = run.stdout.split()
    report("per_thread_streams_wait", (float(top) == 0.0) if same == "True" else None,
           f"same memory {same}; max of thread b's zeroed array: {top}")


def costs():
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rt = coop.Runtime(coop.allocator("64MiB"))
    spec = rt.cost_model.name
    report("default_cost_model", None if caught else True,
           f"device {name!r} -> {spec}" + (f" (warned: {caught[0].message})" if caught else ""))
    rt = coop.Runtime(coop.allocator("512MiB"), cost="timing")
    a = rt.tensor(np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32))
    matmul = coop.Kernel(lambda p, q: p @ q, name="matmul")
    times = []
    for _ in range(3):                     # the first run is cold (cuBLAS makes its handle)
        before = rt.clock
        rt.apply(matmul, a, a)
        times.append(rt.clock - before)
    cold, measured = times[0], times[-1]
    model = coop.DEVICES.get(spec, coop.DEVICES["a100-80gb"]).cost_ns(2 * 2048 ** 3, 3 * 2048 ** 2 * 4)
    results["matmul_event_times_us"] = [t / 1e3 for t in times]
    report("timing_with_cuda_events",
           0.2 * model < measured < 20 * model and times[1] < 2 * measured,
           f"2048^3 fp32 matmul by CUDA events: {', '.join(f'{t / 1e3:.1f}' for t in times)} us "
           f"(the first cold; the second its own, not the first's), roofline {model / 1e3:.1f} us")


def timing_overhead():
    """Wall time of 2000 small kernels with cost="timing" (CUDA events, read without a
    synchronize per op) against the h200 cost model (no events): the events' overhead."""
    import time

    def chain(cost):
        rt = coop.Runtime(coop.allocator("256MiB"), cost=cost)
        x = rt.tensor(np.ones((256, 256), dtype=np.float32))
        tanh = coop.Kernel(lambda a, xp: xp.tanh(a), name="tanh")
        for _ in range(50):
            x = rt.apply(tanh, x)
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(2000):
            x = rt.apply(tanh, x)
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - start

    model, timed = min(chain("h200") for _ in range(3)), min(chain("timing") for _ in range(3))
    ratio = timed / model
    results["timing_overhead_ratio"] = ratio
    report("timing_overhead", ratio < 2.0,
           f"2000 tanh 256x256: {timed * 1e6 / 2000:.1f} us/op timed by events, "
           f"{model * 1e6 / 2000:.1f} us/op modelled: x{ratio:.2f}")


def dropout_recompute():
    rt = coop.Runtime(coop.allocator("256MiB"), cost="h200")
    x = rt.tensor(np.random.default_rng(0).uniform(1, 2, (512, 512)).astype(np.float32),
                  requires_grad=True)
    y = ops.dropout(x, 0.3)
    first = y.numpy()
    mask = y.grad_fn.saved[0]
    rt.evict(y, mask)
    again = y.numpy()
    kept = float((first != 0).mean())
    report("dropout_recompute_bit_exact",
           bool(np.array_equal(first, again)) and rt.stats()["recomputes"] >= 1,
           f"recomputes {rt.stats()['recomputes']}, kept fraction {kept:.3f}")


def no_sync_in_a_step():
    """Training steps whose ops never wait for the device: a small GPT (AdamW) and a
    four convolutions with pooling, at the first of 0.6x-0.9x their unlimited peak that completes
    (so that they evict and recompute),
    each step's forward, backward and update run under cupyx.allow_synchronize(False), which
    raises where CuPy would synchronize (a device value read on the host, a blocking copy).
    The loss is read after each step, outside. A failure names the op where it happened."""
    import cupyx
    from coop.models import GPT
    from coop.optim import AdamW

    rng = np.random.default_rng(0)
    idx = rng.integers(0, 64, (32, 32))
    x0 = rng.standard_normal((8, 3, 32, 32)).astype(np.float32)
    w0 = [(rng.standard_normal((16, c, 3, 3)) * 0.1).astype(np.float32) for c in (3, 16, 16, 16)]

    def gpt(budget, steps):
        rt = coop.Runtime(coop.allocator(budget), cost="h200")
        model = GPT(rt, 64, 32, 2, 2, 64, rng=0)
        opt = AdamW(model.parameters(), lr=1e-3)
        for _ in range(steps):
            with cupyx.allow_synchronize(False):
                loss = model.loss(idx, np.roll(idx, -1, axis=1))
                loss.backward()
                opt.step()
                opt.zero_grad()
            float(loss.numpy())
            del loss
        return rt

    def conv(budget, steps):
        rt = coop.Runtime(coop.allocator(budget), cost="h200")
        ws = [rt.tensor(w, requires_grad=True) for w in w0]
        for _ in range(steps):
            with cupyx.allow_synchronize(False):
                y = rt.tensor(x0)
                for w in ws:
                    y = ops.relu(ops.conv2d(y, w, padding=1))
                y = ops.max_pool2d(y, 2)
                loss = ops.sum(ops.mul(y, y))
                loss.backward()
            float(loss.numpy())
            for w in ws:
                w.grad = None
            del y, loss
        return rt

    details = []
    for name, step in (("gpt", gpt), ("conv", conv)):
        peak = step("1GiB", 3).stats()["peak_used_bytes"]
        try:
            for ratio in (0.6, 0.7, 0.8, 0.9):     # the first that completes
                try:
                    stats = step(max(int(ratio * peak), 1 << 20), 3).stats()
                    break
                except coop.OutOfMemoryError:
                    continue
            else:
                details.append(f"{name}: out of memory at 0.6x-0.9x (no step to check)")
                continue
            details.append(f"{name}: none in 3 steps at {ratio}x ({stats['evictions']} "
                           f"evictions, {stats['recomputes']} recomputes)")
        except cupyx.DeviceSynchronized as err:
            import traceback
            frames = [f for f in traceback.extract_tb(err.__traceback__) if "/coop/" in f.filename]
            where = f"{frames[-1].filename.split('/coop/')[-1]}:{frames[-1].lineno}" if frames \
                else "?"
            report("no_sync_in_a_step", False, f"{name}: a device synchronize at {where}")
            return
    report("no_sync_in_a_step", True, "; ".join(details))


def embedding_backward():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((50, 64)).astype(np.float32)
    idx = rng.integers(0, 50, (64, 128))
    g = rng.standard_normal((64, 128, 64)).astype(np.float32)
    grads = []
    for _ in range(3):
        rt = coop.Runtime(coop.allocator("256MiB"), cost="h200")
        w = rt.tensor(w0, requires_grad=True)
        out = ops.embedding(w, rt.tensor(idx))
        (out * rt.tensor(g)).sum().backward()
        grads.append(w.grad.numpy())
    host = np.zeros_like(w0)
    np.add.at(host, idx, g)
    same = all(np.array_equal(grads[0], other) for other in grads[1:])
    report("embedding_backward_deterministic", same,
           f"3 runs bit-identical: {same}; max |gpu - numpy add.at| "
           f"{float(np.abs(grads[0] - host).max()):.3g}")


def _link_rate(way, nbytes, stream, dev, src, back):
    """Bytes per second of one way's copy of nbytes between pinned host memory (src, back) and
    the device (dev) on stream, timed by CUDA events: median of 5 after one warm-up."""
    n = nbytes // 4
    times = []
    for i in range(6):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        if way == "h2d":
            dev[:n].set(src[:n], stream=stream)
        else:
            dev[:n].get(stream=stream, out=back[:n], blocking=False)
        end.record(stream)
        end.synchronize()
        if i:
            times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return nbytes / float(np.median(times))


def host_link():
    """Host <-> device copies of 256 MiB between pinned host memory and the device on a
    non-blocking stream, timed by CUDA events (median of 5 each way after one warm-up): the
    bytes come back unchanged, and the rates beside the cost model's host link."""
    import cupyx
    nbytes = 256 * 2**20
    src = cupyx.empty_pinned(nbytes // 4, np.float32)
    src[:] = np.arange(src.size, dtype=np.float32)
    back = cupyx.empty_pinned(src.size, np.float32)
    dev = cupy.empty(src.size, np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    rates = {way: _link_rate(way, nbytes, stream, dev, src, back) for way in ("h2d", "d2h")}
    exact = bool(np.array_equal(src, back))
    name = coop.Runtime(coop.allocator("64MiB")).cost_model.name
    spec = coop.DEVICES.get(name, coop.DEVICES["a100-80gb"])
    model = {way: getattr(spec, f"{way}_bytes_per_s", None) for way in rates}
    detail = ", ".join(
        f"{way} {rates[way] / 1e9:.1f} GB/s"
        + (f" (cost model {spec.name}: {model[way] / 1e9:.1f}, measured/model "
           f"{rates[way] / model[way]:.2f})" if model[way] else f" (cost model {spec.name}: none)")
        for way in rates)
    report("host_link", exact, ("bytes back unchanged; " if exact else "BYTES DIFFER; ") + detail)
    for way, rate in rates.items():      # numbers, not probes (a probe's entry is a dict)
        results[f"host_link_{way}_bytes_per_s"] = rate
    # smaller copies: the link's fixed cost per copy beside its rate (median of 5 each)
    curve = {f"{way} {size >> 10} KiB": _link_rate(way, size, stream, dev, src, back)
             for size in (64 << 10, 1 << 20, 16 << 20) for way in ("h2d", "d2h")}
    results["host_link_curve_bytes_per_s"] = list(curve.items())   # numbers: no dict
    report("host_link_small_copies", None,
           ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in curve.items()))
    cupy.cuda.set_allocator(None)


def host_tier():
    """256 MiB to pinned host memory and back through the bound pool's to_host / from_host
    (the copy stream, events both ways), timed by CUDA events on the current stream around
    each call (median of 5 after one warm-up that pins the memory): the bytes come back
    unchanged, and the rates each way beside the cost model's and the plain link's."""
    from coop._core import EXPENSIVE
    nbytes = 256 * 2**20
    pool = coop.allocator("1GiB")
    backend = pool.bound()
    times = {"d2h": [], "h2d": []}
    exact = True
    with pool:
        source = cupy.arange(nbytes // 4, dtype=cupy.uint32)   # every word distinct
        for i in range(6):
            start, middle, end = cupy.cuda.Event(), cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            copy = backend.to_host(source)
            middle.record()       # the current stream passes it once the copy out is done
            back = backend.from_host(copy, EXPENSIVE)
            end.record()
            end.synchronize()
            backend.free_host(copy)
            if i:
                times["d2h"].append(cupy.cuda.get_elapsed_time(start, middle) / 1e3)
                times["h2d"].append(cupy.cuda.get_elapsed_time(middle, end) / 1e3)
            exact = exact and bool((back == source).all())
            del back
    rates = {way: nbytes / float(np.median(t)) for way, t in times.items()}
    for way, rate in rates.items():
        results[f"host_tier_{way}_bytes_per_s"] = rate
    name = coop.Runtime(coop.allocator("64MiB")).cost_model.name
    spec = coop.DEVICES.get(name, coop.DEVICES["a100-80gb"])
    parts = []
    for way, rate in rates.items():
        model = getattr(spec, f"{way}_bytes_per_s", None)
        text = f"{way} {rate / 1e9:.1f} GB/s (cost model {spec.name}: " + (
            f"{model / 1e9:.1f}, measured/model {rate / model:.2f}" if model else "none")
        plain = results.get(f"host_link_{way}_bytes_per_s")
        if plain:
            text += f"; plain link {plain / 1e9:.1f}"
        parts.append(text + ")")
    report("host_tier_round_trip", exact,
           ("256 MiB back unchanged; " if exact else "BYTES DIFFER; ") + ", ".join(parts))


def other_device():
    if cupy.cuda.runtime.getDeviceCount() < 2:
        report("runtime_on_another_device", None, "one device: not probed")
        return
    rt = coop.Runtime(coop.allocator("64MiB"), cost="h200")
    with cupy.cuda.Device(1):
        try:
            rt.tensor(np.ones(4))
            report("runtime_on_another_device", False, "no error")
        except RuntimeError as err:
            report("runtime_on_another_device", "bound to device 0" in str(err), str(err)[:120])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--only", default=None,
                        help="comma-separated probe names (e.g. host_link,host_tier)")
    args = parser.parse_args()
    probes = (reservation, streams, per_thread_streams, costs, timing_overhead,
              dropout_recompute, no_sync_in_a_step, embedding_backward, host_link, host_tier,
              other_device)
    if args.only is not None:
        names = {p.__name__ for p in probes}
        wanted = [name for name in args.only.split(",") if name]
        unknown = sorted(set(wanted) - names)
        if unknown:
            parser.error(f"no probe named {', '.join(unknown)}; probes: {', '.join(sorted(names))}")
        probes = [p for p in probes if p.__name__ in wanted]
    if not cupy.cuda.is_available():
        print("no CUDA device visible to CuPy: nothing to probe")
        return 3
    for probe in probes:
        try:
            probe()
        except Exception as err:  # noqa: BLE001 - a crash is a result
            report(probe.__name__, False, f"crashed: {type(err).__name__}: {str(err)[:200]}")
        cupy.cuda.set_allocator(None)
    with open(os.path.join(args.out, "probes.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 1 if any(isinstance(r, dict) and r["ok"] is False for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
