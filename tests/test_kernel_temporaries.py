"""The kernels that write their steps into arrays they made (GELU, tanh's backward, softmax,
log_softmax and their backwards, layer norm, the optimizers' updates): bit for bit the plain
expressions they replace,
for every dtype mix and for 0-d arrays, with at most the arrays each one's comment names live
at once (tracemalloc on NumPy's own allocations). A kernel's temporaries are pinned in the arena
beside its inputs while it runs (CuPy makes a new array for every step of an expression), so
fewer of them is a smaller budget that still completes."""
import math
import tracemalloc

import numpy as np
import pytest

from coop import optim
from coop.ops import elementwise, nn, norm

C = math.sqrt(2.0 / math.pi)


# ---- the plain expressions (the kernels before they wrote into their own arrays) ------------

def gelu(xp, x):
    return 0.5 * x * (1.0 + xp.tanh(C * (x + 0.044715 * x * x * x)))


def gelu_derivative(xp, x, g):
    t = xp.tanh(C * (x + 0.044715 * x * x * x))
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3 * 0.044715 * x * x))


def tanh_derivative(xp, y, g):
    return g * (1 - y * y)


def softmax(xp, x, axis):
    e = xp.exp(x - x.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return e


def log_softmax(xp, x, axis):
    s = x - x.max(axis=axis, keepdims=True)
    return s - xp.log(xp.exp(s).sum(axis=axis, keepdims=True))


def softmax_derivative(xp, y, g, axis):
    return y * (g - (g * y).sum(axis=axis, keepdims=True))


def log_softmax_derivative(xp, y, g, axis):
    return g - xp.exp(y) * g.sum(axis=axis, keepdims=True)


def normalized(xp, x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    invstd = 1.0 / xp.sqrt(var + eps)
    return centered * invstd, mean, var, invstd


def norm_forward(x, w, b, xp, axes, eps, wshape):
    xhat, _, _, _ = normalized(xp, x, axes, eps)
    return xhat * w.reshape(wshape) + b.reshape(wshape)


def norm_backward(x, w, g, xp, axes, eps, wshape):
    xhat, _, _, invstd = normalized(xp, x, axes, eps)
    dxhat = g * w.reshape(wshape)
    dx = invstd * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                   - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    return dx, norm.sum_to(g * xhat, wshape).reshape(w.shape), \
        norm.sum_to(g, wshape).reshape(w.shape)


def sgd_decayed(p, g, lr, weight_decay):
    p -= lr * (g + weight_decay * p if weight_decay else g)


def momentum(buf, g, p, momentum, weight_decay):
    buf *= momentum
    buf += g + weight_decay * p if weight_decay else g


def ema_square(v, g, beta):
    v *= beta
    v += (1.0 - beta) * (g * g)


def adamw(p, m, v, xp, lr, weight_decay, eps, correction1, correction2):
    if weight_decay:
        p *= 1.0 - lr * weight_decay
    denom = xp.sqrt(v) / correction2 ** 0.5 + eps
    p -= (lr / correction1) * (m / denom)


# ---- cases -------------------------------------------------------------------------------------

SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 33)]
DTYPES = [np.float32, np.float64, np.float16]


def data(xp, shape, dtype, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    return xp.asarray((rng.standard_normal(shape) * scale).astype(dtype))


def same(xp, got, want):
    to_np = (lambda a: a.get()) if hasattr(xp, "cuda") else np.asarray
    got, want = to_np(xp.asarray(got)), to_np(xp.asarray(want))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def check_unary(xp):
    for shape in SHAPES:
        for dx in DTYPES:
            for dg in DTYPES:
                x, g = data(xp, shape, dx, 0), data(xp, shape, dg, 1)
                same(xp, elementwise._gelu(xp, x), gelu(xp, x))
                same(xp, elementwise._gelu_derivative(xp, x, g), gelu_derivative(xp, x, g))
                y = xp.tanh(x)
                same(xp, elementwise._tanh_derivative(xp, y, g), tanh_derivative(xp, y, g))
                for axis in range(len(shape)):
                    same(xp, nn._softmax(xp, x, axis), softmax(xp, x, axis))
                    same(xp, nn._log_softmax(xp, x, axis), log_softmax(xp, x, axis))
                    p = softmax(xp, x, axis)
                    same(xp, nn._softmax_derivative(xp, p, g, axis),
                         softmax_derivative(xp, p, g, axis))
                    lp = log_softmax(xp, x, axis)
                    same(xp, nn._log_softmax_derivative(xp, lp, g, axis),
                         log_softmax_derivative(xp, lp, g, axis))
    ints = xp.asarray(np.arange(12, dtype=np.int64).reshape(3, 4) % 5)
    same(xp, nn._softmax(xp, ints, 1), softmax(xp, ints, 1))      # integers: float64 results
    same(xp, nn._log_softmax(xp, ints, 1), log_softmax(xp, ints, 1))


def check_norm(xp):
    for shape, wshape in (((4, 6, 8), (8,)), ((2, 3, 5), (3, 5)), ((5, 1), (1,))):
        axes = tuple(range(len(shape) - len(wshape), len(shape)))
        full = (1,) * (len(shape) - len(wshape)) + wshape
        for dx in DTYPES:
            for dw in (np.float32, np.float64):
                x, g = data(xp, shape, dx, 2), data(xp, shape, dx, 3)
                w, b = data(xp, wshape, dw, 4, 1.0), data(xp, wshape, dw, 5, 1.0)
                same(xp, norm._forward(x, w, b, xp, axes, 1e-5, full),
                     norm_forward(x, w, b, xp, axes, 1e-5, full))
                for got, want in zip(norm._backward(x, w, g, xp, axes, 1e-5, full),
                                     norm_backward(x, w, g, xp, axes, 1e-5, full)):
                    same(xp, got, want)


def check_optim(xp):
    """Each update applied to copies of the same parameter and state, new against plain."""
    for shape in SHAPES:
        for dp in (np.float32, np.float64):
            for dg in (np.float32, np.float64):
                p, g = data(xp, shape, dp, 6), data(xp, shape, dg, 7)
                m, v = data(xp, shape, dp, 8), xp.abs(data(xp, shape, dp, 9))
                for wd in (0.0, 0.01):
                    runs = [
                        (lambda a, b: optim._sgd_decayed(a, g, xp, 0.1, wd),
                         lambda a, b: sgd_decayed(a, g, 0.1, wd)),
                        (lambda a, b: optim._momentum(a, g, b, xp, 0.9, wd),
                         lambda a, b: momentum(a, g, b, 0.9, wd)),
                        (lambda a, b: optim._ema_square(a, g, 0.999),
                         lambda a, b: ema_square(a, g, 0.999)),
                        (lambda a, b: optim._adamw(a, m, v, xp, 1e-3, wd, 1e-8, 0.1, 0.001),
                         lambda a, b: adamw(a, m, v, xp, 1e-3, wd, 1e-8, 0.1, 0.001)),
                    ]
                    for new, plain in runs:
                        a, b = p.copy(), p.copy()
                        new(a, p.copy())
                        plain(b, p.copy())
                        same(xp, a, b)


def test_the_kernels_give_the_plain_expressions_bits_on_numpy():
    check_unary(np)
    check_norm(np)
    check_optim(np)


@pytest.mark.cuda
def test_the_kernels_give_the_plain_expressions_bits_on_cupy():
    import cupy
    check_unary(cupy)
    check_norm(cupy)
    check_optim(cupy)


# ---- the arrays live at once --------------------------------------------------------------------

N = 1 << 18          # elements per array: 1 MiB of float32, far above what the reductions keep


def peak_arrays(fn, *args):
    """The most bytes fn held beyond its arguments at any time, in arrays of N float32."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out = fn(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del out
    return (peak - before) / (4 * N)


@pytest.mark.parametrize("name, run, most, expression, before", [
    ("gelu", lambda x, g: elementwise._gelu(np, x), 2, lambda x, g: gelu(np, x), 3),
    ("gelu_backward", lambda x, g: elementwise._gelu_derivative(np, x, g), 3,
     lambda x, g: gelu_derivative(np, x, g), 5),
    ("tanh_backward", lambda x, g: elementwise._tanh_derivative(np, x, g), 1,
     lambda x, g: tanh_derivative(np, x, g), 2),
    ("softmax", lambda x, g: nn._softmax(np, x, 1), 1, lambda x, g: softmax(np, x, 1), 2),
    ("log_softmax", lambda x, g: nn._log_softmax(np, x, 1), 2,
     lambda x, g: log_softmax(np, x, 1), 2),
    ("softmax_backward", lambda x, g: nn._softmax_derivative(np, x, g, 1), 1,
     lambda x, g: softmax_derivative(np, x, g, 1), 1),
    ("log_softmax_backward", lambda x, g: nn._log_softmax_derivative(np, x, g, 1), 1,
     lambda x, g: log_softmax_derivative(np, x, g, 1), 2),
])
def test_a_kernel_holds_at_most_the_arrays_it_names(name, run, most, expression, before):
    x = np.random.default_rng(0).standard_normal((512, N // 512)).astype(np.float32)
    g = np.ones_like(x)
    held = peak_arrays(run, x, g)
    assert most <= held < most + 0.05, (name, held)
    # the plain expression, with NumPy's reuse of some temporaries (CuPy reuses none)
    held = peak_arrays(expression, x, g)
    assert before <= held < before + 0.05, (name, held)


def test_an_adamw_update_holds_one_array_of_its_parameters_size():
    rng = np.random.default_rng(0)
    p, m = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    v = np.abs(rng.standard_normal(N)).astype(np.float32)
    args = (m, v, np, 1e-3, 0.01, 1e-8, 0.1, 0.001)
    assert 1 <= peak_arrays(optim._adamw, p.copy(), *args) < 1.05
    assert 3 <= peak_arrays(adamw, p.copy(), *args) < 3.05      # the expression, on NumPy


def test_layer_norm_holds_two_arrays_forward_and_three_backward():
    x = np.random.default_rng(0).standard_normal((512, N // 512)).astype(np.float32)
    w, b = np.ones(N // 512, np.float32), np.zeros(N // 512, np.float32)
    axes, full = (1,), (1, N // 512)
    forward = peak_arrays(norm._forward, x, w, b, np, axes, 1e-5, full)
    backward = peak_arrays(norm._backward, x, w, x, np, axes, 1e-5, full)
    assert 2 <= forward < 2.05 and 3 <= backward < 3.05, (forward, backward)
    assert 3 <= peak_arrays(norm_forward, x, w, b, np, axes, 1e-5, full) < 3.05
    assert 4 <= peak_arrays(norm_backward, x, w, x, np, axes, 1e-5, full) < 4.05


# ---- convolutions: the window matrix a slice of the batch at a time ----------------------------

from coop.ops import conv  # noqa: E402


@pytest.mark.parametrize("on", ["numpy", pytest.param("cupy", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("stride, padding, bias", [(1, 1, True), (2, 0, False), (1, 0, True),
                                                   (2, 2, False)])
def test_a_convolution_cut_by_the_batch_gives_the_whole_batchs_result(monkeypatch, on, stride,
                                                                       padding, bias):
    xp = pytest.importorskip(on)
    rng = np.random.default_rng(0)
    x = xp.asarray(rng.standard_normal((7, 5, 9, 8)).astype(np.float32))
    w = xp.asarray(rng.standard_normal((6, 5, 3, 3)).astype(np.float32))
    b = (xp.asarray(rng.standard_normal(6).astype(np.float32)),) if bias else ()
    attrs = dict(stride=stride, padding=padding)
    cuts, chunks = [], conv._chunks
    monkeypatch.setattr(conv, "_chunks", lambda *a: cuts.append(chunks(*a)) or cuts[-1])
    out = conv._conv2d(x, w, *b, xp=xp, **attrs)
    g = xp.asarray(rng.standard_normal(out.shape).astype(np.float32))
    gx = conv._conv2d_grad_input(g, w, xp, x_shape=x.shape, **attrs)
    gw = conv._conv2d_grad_weight(x, g, xp, kernel_size=(3, 3), **attrs)
    assert len(cuts) == 3 and all(len(cut) > 1 for cut in cuts), cuts    # each was cut
    monkeypatch.setattr(conv, "_chunks", lambda n, per_item, limit: [(0, n)])
    whole = (conv._conv2d(x, w, *b, xp=xp, **attrs),
             conv._conv2d_grad_input(g, w, xp, x_shape=x.shape, **attrs),
             conv._conv2d_grad_weight(x, g, xp, kernel_size=(3, 3), **attrs))
    for got, want in zip((out, gx, gw), whole):
        assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
        # each sample's rows are their own products; the weight gradient adds the slices' sums
        host = (lambda a: a.get()) if on == "cupy" else np.asarray
        np.testing.assert_allclose(host(got), host(want), rtol=2e-5, atol=2e-5)


def test_the_batch_ranges_cover_it_in_order_within_the_limit():
    assert conv._chunks(10, 3, 9) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert conv._chunks(10, 100, 9) == [(i, i + 1) for i in range(10)]   # one sample at least
    assert conv._chunks(4, 1, 100) == [(0, 4)]
    assert conv._chunks(3, 0, 0) == [(0, 1), (1, 2), (2, 3)]
    assert conv._chunks(0, 5, 5) == [(0, 0)]                            # an empty batch


def test_an_empty_batch_convolves_to_empty_results():
    x, w = np.zeros((0, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    out = conv._conv2d(x, w, xp=np, stride=1, padding=1)
    assert out.shape == (0, 3, 5, 5)
    gx = conv._conv2d_grad_input(out, w, np, stride=1, padding=1, x_shape=x.shape)
    gw = conv._conv2d_grad_weight(x, out, np, stride=1, padding=1, kernel_size=(3, 3))
    assert gx.shape == x.shape and gw.shape == w.shape and not gw.any()


def test_a_convolution_holds_about_its_outputs_size_in_temporaries():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16, 28, 28)).astype(np.float32)      # 1.5 MiB
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    out_bytes = x.nbytes                                              # padding 1: same shape
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        out = conv._conv2d(x, w, xp=np, stride=1, padding=1)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert out.nbytes == out_bytes
    # the output, and at most about its size in window matrices (the whole batch's: 9x)
    assert out_bytes * 1.9 < peak < out_bytes * 2.5, peak / out_bytes
