"""Every op of coop.ops: forward values against plain NumPy, gradients against central finite
differences (float64), shape rules against the host's outputs (forward and backward run in
simulation), and the kernels' cheap/expensive classes."""
import json
import math

import numpy as np
import pytest

import coop
from _gradcheck import (A, D, I, N, P, analytic, const, draw, evaluate, host_runtime,
                        np_conv_transpose2d, numeric, specs)
from coop import ops

# ---- NumPy references -------------------------------------------------------------------------


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def np_softmax(x, axis=-1):
    return np.exp(np_log_softmax(x, axis))


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def np_normalize(x, axes, eps=1e-5):
    return (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


def channels(v):
    """A per-channel vector shaped to broadcast over NCHW."""
    return v[:, None, None]


def np_conv2d(x, w, b=None, stride=1, padding=0):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, _, h, wd = x.shape
    f, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, f, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,fchw->nf", patch, w)
    return out if b is None else out + b[None, :, None, None]


def np_pool(x, k, stride, reduce, padding=0, fill=0.0):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=fill)
    oh, ow = (x.shape[2] - k) // stride + 1, (x.shape[3] - k) // stride + 1
    return np.stack([np.stack([reduce(x[:, :, i * stride:i * stride + k, j * stride:j * stride + k],
                                      axis=(2, 3)) for j in range(ow)], -1) for i in range(oh)], -2)


def np_lstm(x, h, c, w_ih, w_hh, b):
    gates = x @ w_ih + h @ w_hh + b
    i, f, g, o = np.split(gates, 4, axis=1)
    c2 = np_sigmoid(f) * c + np_sigmoid(i) * np.tanh(g)
    return np.concatenate([np_sigmoid(o) * np.tanh(c2), c2], axis=1)


def lstm(*inputs):
    return ops.concatenate(ops.lstm_cell(*inputs), axis=1)


# ---- cases: name -> (fn on tensors, inputs, NumPy reference or None) --------------------------

BN_ARGS = (N(4, 3, 2, 2), N(3), N(3), const(N(3)), const(P(3)))

CASES = {
    "add": (lambda a, b: a + b, (N(3, 4), N(4)), np.add),
    "add/scalar": (lambda a: 2.5 + a + 1, (N(3, 4),), lambda a: a + 3.5),
    "sub": (lambda a, b: a - b, (N(3, 1), N(1, 4)), np.subtract),
    "sub/scalar": (lambda a: 1.5 - a - 0.5, (N(2, 3),), lambda a: 1.0 - a),
    "mul": (lambda a, b: a * b, (N(2, 3, 4), N(3, 1)), np.multiply),
    "mul/scalar": (lambda a: 3.0 * a * 0.5, (N(2, 3),), lambda a: 1.5 * a),
    "div": (lambda a, b: a / b, (N(3, 4), P(4)), np.divide),
    "div/scalar": (lambda a: a / 4.0, (N(2, 3),), lambda a: a / 4.0),
    "div/rscalar": (lambda a: 2.0 / a, (P(2, 3),), lambda a: 2.0 / a),
    "neg": (lambda a: -a, (N(2, 3),), np.negative),
    "pow": (lambda a, b: a ** b, (P(3, 4), N(4)), np.power),
    "pow/scalar": (lambda a: a ** 2.5, (P(2, 3),), lambda a: a ** 2.5),
    "pow/rscalar": (lambda a: 2.0 ** a, (N(2, 3),), lambda a: 2.0 ** a),
    "exp": (ops.exp, (N(2, 3),), np.exp),
    "log": (ops.log, (P(2, 3),), np.log),
    "sqrt": (ops.sqrt, (P(2, 3),), np.sqrt),
    "tanh": (ops.tanh, (N(2, 3),), np.tanh),
    "sigmoid": (ops.sigmoid, (N(2, 3),), np_sigmoid),
    "relu": (ops.relu, (A(3, 4),), lambda a: np.maximum(a, 0)),
    "gelu": (ops.gelu, (N(3, 4),), np_gelu),
    "add_n": (lambda a, b, c: ops.add_n(a, b, c), (N(2, 3), N(2, 3), N(2, 3)),
              lambda a, b, c: a + b + c),
    "copy": (ops.copy, (N(2, 3),), np.copy),
    "sum": (ops.sum, (N(2, 3),), np.sum),
    "sum/axis": (lambda a: a.sum(axis=(0, 2), keepdims=True), (N(2, 3, 4),),
                 lambda a: a.sum(axis=(0, 2), keepdims=True)),
    "mean": (lambda a: a.mean(-1), (N(3, 4),), lambda a: a.mean(-1)),
    "mean/all": (ops.mean, (N(3, 4),), np.mean),
    "max": (lambda a: a.max(1), (D(3, 4),), lambda a: a.max(1)),
    "max/all": (lambda a: a.max(keepdims=True), (D(3, 4),), lambda a: a.max(keepdims=True)),
    "var": (lambda a: a.var(0), (N(4, 3),), lambda a: a.var(0)),
    "var/all": (ops.var, (N(2, 3, 2),), np.var),
    "sum_to": (lambda a: ops.sum_to(a, (3, 1)), (N(2, 3, 4),),
               lambda a: a.sum(axis=(0, 2)).reshape(3, 1)),
    "matmul": (lambda a, b: a @ b, (N(3, 4), N(4, 5)), np.matmul),
    "matmul/batched": (ops.matmul, (N(2, 3, 4), N(4, 5)), np.matmul),
    "matmul/broadcast": (ops.matmul, (N(2, 1, 3, 4), N(3, 4, 2)), np.matmul),
    "matmul/left2d": (ops.matmul, (N(3, 4), N(2, 4, 5)), np.matmul),
    "reshape": (lambda a: a.reshape(2, -1), (N(3, 4),), lambda a: a.reshape(2, -1)),
    "reshape/transposed": (lambda a: a.T.reshape(12), (N(3, 4),), lambda a: a.T.reshape(12)),
    "transpose": (lambda a: a.T, (N(3, 4),), np.transpose),
    "transpose/axes": (lambda a: a.transpose(1, 2, 0), (N(2, 3, 4),),
                       lambda a: a.transpose(1, 2, 0)),
    "getitem": (lambda a: a[1:3, ::2], (N(4, 5),), lambda a: a[1:3, ::2]),
    "getitem/int": (lambda a: a[1], (N(3, 4),), lambda a: a[1]),
    "getitem/newaxis": (lambda a: a[..., None, 1:], (N(2, 3),), lambda a: a[..., None, 1:]),
    "getitem/scalar": (lambda a: a[1, 2], (N(3, 4),), lambda a: a[1, 2]),
    "concatenate": (lambda a, b, c: ops.concatenate([a, b, c], axis=1),
                    (N(2, 3), N(2, 1), N(2, 2)), lambda a, b, c: np.concatenate([a, b, c], 1)),
    "stack": (lambda a, b: ops.stack([a, b], axis=1), (N(2, 3), N(2, 3)),
              lambda a, b: np.stack([a, b], 1)),
    "broadcast_to": (lambda a: a.broadcast_to((2, 3, 4)), (N(3, 1),),
                     lambda a: np.broadcast_to(a, (2, 3, 4))),
    "softmax": (ops.softmax, (N(3, 4),), np_softmax),
    "softmax/axis0": (lambda a: ops.softmax(a, 0), (N(3, 4),), lambda a: np_softmax(a, 0)),
    "log_softmax": (ops.log_softmax, (N(3, 4),), np_log_softmax),
    "cross_entropy": (ops.cross_entropy, (N(4, 5), I(5, 4)),
                      lambda x, t: -np_log_softmax(x)[np.arange(4), t].mean()),
    "dropout": (lambda a: ops.dropout(a, 0.3), (N(4, 5),), None),   # values: test_dropout_*
    "embedding": (ops.embedding, (N(5, 3), I(5, 2, 4)), lambda w, i: w[i]),
    "layer_norm": (ops.layer_norm, (N(2, 3, 4), N(4), N(4)),
                   lambda x, w, b: np_normalize(x, -1) * w + b),
    "layer_norm/2d": (ops.layer_norm, (N(2, 3, 4), N(3, 4), N(3, 4)),
                      lambda x, w, b: np_normalize(x, (1, 2)) * w + b),
    "batch_norm": (ops.batch_norm, BN_ARGS, lambda x, w, b, m, v: np_normalize(x, (0, 2, 3))
                   * channels(w) + channels(b)),
    "batch_norm/2d": (ops.batch_norm, (N(5, 3), N(3), N(3), const(N(3)), const(P(3))),
                      lambda x, w, b, m, v: np_normalize(x, 0) * w + b),
    "batch_norm/eval": (lambda *a: ops.batch_norm(*a, training=False), BN_ARGS,
                        lambda x, w, b, m, v: (x - channels(m)) / np.sqrt(channels(v) + 1e-5)
                        * channels(w) + channels(b)),
    "lstm_cell": (lstm, (N(2, 3), N(2, 4), N(2, 4), N(3, 16), N(4, 16), N(16)), np_lstm),
    "conv2d": (lambda x, w, b: ops.conv2d(x, w, b, padding=1), (N(2, 3, 5, 5), N(4, 3, 3, 3), N(4)),
               lambda x, w, b: np_conv2d(x, w, b, padding=1)),
    "conv2d/stride": (lambda x, w: ops.conv2d(x, w, stride=2), (N(1, 2, 6, 5), N(3, 2, 2, 3)),
                      lambda x, w: np_conv2d(x, w, stride=2)),
    "conv_transpose2d": (lambda x, w, b: ops.conv_transpose2d(x, w, b, stride=2, padding=1),
                         (N(2, 3, 3, 4), N(3, 2, 3, 3), N(2)),
                         lambda x, w, b: np_conv_transpose2d(x, w, b, stride=2, padding=1)),
    "conv_transpose2d/stride1": (ops.conv_transpose2d, (N(1, 2, 3, 3), N(2, 3, 2, 3)),
                                 np_conv_transpose2d),
    "conv_transpose2d/unet": (lambda x, w, b: ops.conv_transpose2d(x, w, b, stride=2),
                              (N(1, 2, 2, 3), N(2, 2, 2, 2), N(2)),
                              lambda x, w, b: np_conv_transpose2d(x, w, b, stride=2)),
    "max_pool2d": (lambda x: ops.max_pool2d(x, 2), (D(2, 2, 4, 4),),
                   lambda x: np_pool(x, 2, 2, np.max)),
    "max_pool2d/overlap": (lambda x: ops.max_pool2d(x, 3, 2), (D(1, 2, 5, 5),),
                           lambda x: np_pool(x, 3, 2, np.max)),
    "avg_pool2d": (lambda x: ops.avg_pool2d(x, 2), (N(2, 2, 4, 4),),
                   lambda x: np_pool(x, 2, 2, np.mean)),
    "avg_pool2d/overlap": (lambda x: ops.avg_pool2d(x, 3, 1), (N(1, 2, 4, 5),),
                           lambda x: np_pool(x, 3, 1, np.mean)),
    "max_pool2d/padding": (lambda x: ops.max_pool2d(x, 3, 2, padding=1), (D(2, 2, 5, 6),),
                           lambda x: np_pool(x, 3, 2, np.max, 1, -np.inf)),
    "avg_pool2d/padding": (lambda x: ops.avg_pool2d(x, 3, 2, padding=1), (N(1, 2, 5, 4),),
                           lambda x: np_pool(x, 3, 2, np.mean, 1)),
    "pad": (lambda a: ops.pad(a, ((1, 0), (2, 3))), (N(2, 3),),
            lambda a: np.pad(a, ((1, 0), (2, 3)))),
    "pad/nchw": (lambda a: ops.pad(a, ((0, 0), (0, 0), (1, 1), (0, 2))), (N(2, 1, 2, 3),),
                 lambda a: np.pad(a, ((0, 0), (0, 0), (1, 1), (0, 2)))),
    "roll": (lambda a: ops.roll(a, 2, 1), (N(3, 4),), lambda a: np.roll(a, 2, 1)),
    "roll/axes": (lambda a: ops.roll(a, (1, -3), (0, -1)), (N(2, 3, 4),),
                  lambda a: np.roll(a, (1, -3), (0, -1))),
    "roll/broadcast": (lambda a: ops.roll(a, 1, (1, 2, 1)), (N(2, 3, 4),),
                       lambda a: np.roll(a, 1, (1, 2, 1))),
    "upsample_nearest2d": (lambda x: ops.upsample_nearest2d(x, 2), (N(2, 3, 2, 3),),
                           lambda x: x.repeat(2, axis=2).repeat(2, axis=3)),
    "upsample_nearest2d/scale3": (lambda x: ops.upsample_nearest2d(x.transpose(0, 1, 3, 2), 3),
                                  (N(1, 2, 3, 2),),
                                  lambda x: x.transpose(0, 1, 3, 2).repeat(3, 2).repeat(3, 3)),
}
NOT_DIFFERENTIABLE = {"ones_like"}   # seeds backward() in every case


def test_every_op_has_a_case():
    covered = {name.split("/")[0] for name in CASES}
    assert set(ops.__all__) - NOT_DIFFERENTIABLE <= covered


@pytest.mark.parametrize("name", [n for n, case in CASES.items() if case[2] is not None])
def test_forward_matches_numpy(name):
    fn, args, reference = CASES[name]
    arrays = draw(args)
    np.testing.assert_allclose(evaluate(fn, args, arrays), reference(*arrays),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    fn, args, _ = CASES[name]
    arrays = draw(args)
    weight = np.random.default_rng(1).standard_normal(evaluate(fn, args, arrays).shape)
    _, grads = analytic(fn, args, arrays, weight)
    want = numeric(fn, args, arrays, weight)
    assert len(grads) == len(want) > 0
    for got, expected, array in zip(grads, want, (a for a, arg in zip(arrays, args) if arg.grad)):
        assert got.shape == array.shape and got.dtype == array.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", CASES)
def test_shape_rules_match_the_host(name, dtype):
    """Forward and backward in simulation (shape rules only) give the host's shapes and dtypes."""
    fn, args, _ = CASES[name]
    arrays = draw(args, dtype=dtype)
    host = specs(host_runtime(), fn, args, arrays)
    sim = specs(coop.Runtime(coop.SimBackend("1GiB"), cost="cpu"), fn, args, arrays)
    assert [(shape, np.dtype(d)) for shape, d in sim] == host
    assert host[0][1] == dtype


def test_kernel_classes_follow_the_papers_table(tmp_path):
    """matmul, batch_matmul, conv2d, conv_transpose2d and their gradients, add_n are EXPENSIVE;
    all else CHEAP."""
    expensive = {"matmul", "batch_matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight",
                 "conv_transpose2d", "conv_transpose2d_grad_input", "conv_transpose2d_grad_weight",
                 "add_n"}
    classes = {}
    for k, (name, (fn, args, _)) in enumerate(CASES.items()):
        rt = host_runtime()
        path = tmp_path / f"{k}.jsonl"
        with rt.record(path):
            specs(rt, fn, args, draw(args))
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "name" in record:
                classes.setdefault(record["name"], set()).add(record["cls"])
    assert expensive <= set(classes)
    for kernel, seen in classes.items():
        assert seen == {"expensive" if kernel in expensive else "cheap"}, kernel


@pytest.fixture(scope="module")
def device_runtime():
    return coop.Runtime(coop.allocator("256MiB"))


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(CASES))     # dropout too: the same Philox mask
def test_kernels_give_the_hosts_values_and_gradients_on_cupy(name, device_runtime):
    fn, args, _ = CASES[name]
    arrays = draw(args)
    weight = np.random.default_rng(1).standard_normal(evaluate(fn, args, arrays).shape)
    host_value, host_grads = analytic(fn, args, arrays, weight)
    value, grads = analytic(fn, args, arrays, weight, device_runtime)
    for got, want in zip([value] + grads, [host_value] + host_grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


# ---- op semantics beyond values and gradients -------------------------------------------------


def test_dropout_scales_kept_values_and_replays_its_mask_on_recompute():
    rt = host_runtime()
    x = rt.tensor(np.random.default_rng(0).uniform(1, 2, (40, 50)), requires_grad=True)
    y = ops.dropout(x, 0.3)
    first = y.numpy()
    kept = first != 0
    np.testing.assert_array_equal(first[kept], x.numpy()[kept] * (1 / 0.7))
    assert abs(kept.mean() - 0.7) < 0.05
    mask = y.grad_fn.saved[0]
    rt.evict(y, mask)
    assert y.storage.array is None and mask.storage.array is None
    np.testing.assert_array_equal(y.numpy(), first)              # recomputed, bit for bit
    np.testing.assert_array_equal(mask.numpy(), kept)
    assert rt.stats()["recomputes"] == 1
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), kept * (1 / 0.7))
    assert ops.dropout(x, 0.3, training=False) is x and ops.dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="dropout probability"):
        ops.dropout(x, 1.0)


def test_batch_norm_updates_running_statistics_in_place_and_eval_uses_them():
    rt = host_runtime()
    x_np = np.random.default_rng(0).standard_normal((6, 3, 2, 2)) * 2 + 1
    x, w, b = rt.tensor(x_np), rt.tensor(np.ones(3)), rt.tensor(np.zeros(3))
    mean, var = rt.tensor(np.zeros(3)), rt.tensor(np.ones(3))
    storages = mean.storage, var.storage
    for _ in range(2):
        ops.batch_norm(x, w, b, mean, var, momentum=0.25)
    assert (mean.storage, var.storage) == storages                # updated in place
    batch_mean, batch_var = x_np.mean(axis=(0, 2, 3)), x_np.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(mean.numpy(), batch_mean * (1 - 0.75 ** 2), rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), 0.75 ** 2 + batch_var * (1 - 0.75 ** 2), rtol=1e-12)
    out = ops.batch_norm(x, w, b, mean, var, training=False)
    expected = (x_np - mean.numpy()[:, None, None]) / np.sqrt(var.numpy() + 1e-5)[:, None, None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


def test_conv_transpose2d_is_the_adjoint_of_conv2d():
    """<conv2d(y, w), x> == <y, conv_transpose2d(x, w)> for every stride and padding."""
    rt = host_runtime()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2, 3, 3))
    for stride, padding in ((1, 0), (2, 1), (3, 2)):
        x = rng.standard_normal((2, 3, 4, 3))
        y = ops.conv_transpose2d(rt.tensor(x), rt.tensor(w), stride=stride, padding=padding)
        y_np = rng.standard_normal(y.shape)
        down = ops.conv2d(rt.tensor(y_np), rt.tensor(w), stride=stride, padding=padding)
        assert down.shape == x.shape
        np.testing.assert_allclose(np.sum(down.numpy() * x), np.sum(y_np * y.numpy()),
                                   rtol=1e-12)


def test_padded_max_pool_pads_with_minus_infinity_and_avg_pool_counts_the_zeros():
    rt = host_runtime()
    x = rt.tensor(-np.arange(1.0, 17.0).reshape(1, 1, 4, 4), requires_grad=True)
    out = ops.max_pool2d(x, 3, 2, padding=1)
    np.testing.assert_array_equal(out.numpy()[0, 0], [[-1.0, -2.0], [-5.0, -6.0]])
    out.sum().backward()
    want = np.zeros((4, 4))
    want[[0, 0, 1, 1], [0, 1, 0, 1]] = 1.0
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], want)
    corner = ops.avg_pool2d(rt.tensor(np.ones((1, 1, 2, 2))), 3, 1, padding=1).numpy()
    np.testing.assert_array_equal(corner[0, 0], np.full((2, 2), 4 / 9))


def test_embedding_gradient_accumulates_repeated_indices():
    rt = host_runtime()
    weight = rt.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    out = ops.embedding(weight, rt.tensor(np.array([[1, 3, 1], [1, 0, 0]])))
    out.sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy(), np.array([[2.0] * 3, [3.0] * 3,
                                                                 [0.0] * 3, [1.0] * 3]))


@pytest.mark.parametrize("call, error", [
    (lambda t: ops.matmul(t["v"], t["m"]), "2 or more dims"),
    (lambda t: ops.matmul(t["m"], t["m"]), "do not match"),
    (lambda t: t["m"].reshape(5, -1), "cannot reshape"),
    (lambda t: ops.transpose(t["m"], (0, 0)), "repeated axis"),
    (lambda t: ops.concatenate([t["m"], t["v"]]), "do not match"),
    (lambda t: ops.cross_entropy(t["m"], t["m"]), "integer targets"),
    (lambda t: ops.add_n(t["m"], t["v"]), "one shape and dtype"),
    (lambda t: ops.conv2d(t["m"], t["m"]), "conv2d: x"),
    (lambda t: ops.conv_transpose2d(t["img"], t["m"]), "conv_transpose2d: x"),
    (lambda t: ops.conv_transpose2d(t["img"], t["w"], t["m"]), "conv_transpose2d: x"),
    (lambda t: ops.conv_transpose2d(t["img"], t["w"][:1]), "2 channels, weight expects 1"),
    (lambda t: ops.conv_transpose2d(t["img"], t["w"], padding=4), "padding 4 leaves no output"),
    (lambda t: ops.conv_transpose2d(t["img"], t["w"], stride=0), "stride >= 1"),
    (lambda t: ops.pad(t["m"], ((1, 1),)), "pad: pad_width must be 2"),
    (lambda t: ops.pad(t["m"], ((1, -1), (0, 0))), "pad: pad_width"),
    (lambda t: ops.pad(t["m"], ((1, 1.5), (0, 0))), "pad: pad_width"),
    (lambda t: ops.pad(t["m"], 1), "pad: pad_width"),
    (lambda t: ops.roll(t["m"], (1, 2, 3), (0, 1)), "roll: 3 shifts for 2 axes"),
    (lambda t: ops.roll(t["m"], 1, 2), "roll: axis 2 is out of bounds"),
    (lambda t: ops.roll(t["m"], 1.5, 0), "roll: shift and axis"),
    (lambda t: ops.upsample_nearest2d(t["m"], 2), "upsample_nearest2d: x"),
    (lambda t: ops.upsample_nearest2d(t["img"], 1.5), "upsample_nearest2d: scale"),
    (lambda t: ops.upsample_nearest2d(t["img"], 0), "upsample_nearest2d: scale"),
    (lambda t: ops.max_pool2d(t["img"], 2, padding=2), "max_pool2d: .*padding <= k // 2"),
    (lambda t: ops.avg_pool2d(t["img"], 2, stride=0), "avg_pool2d: .*stride >= 1"),
    (lambda t: ops.avg_pool2d(t["img"], 5), "avg_pool2d: window 5 does not fit"),
    (lambda t: ops.max_pool2d(t["m"], 2), "max_pool2d: x"),
])
def test_bad_arguments_raise_with_the_op_in_the_message(call, error):
    rt = host_runtime()
    tensors = {"m": rt.tensor(np.ones((2, 3))), "v": rt.tensor(np.ones(3)),
               "img": rt.tensor(np.ones((1, 2, 4, 4))), "w": rt.tensor(np.ones((2, 3, 2, 2)))}
    with pytest.raises((ValueError, TypeError), match=error):
        call(tensors)


def test_array_and_list_operands_and_indices_are_refused():
    rt = host_runtime()
    x = rt.tensor(np.ones((2, 3)))
    with pytest.raises(TypeError, match="not a coop.Tensor"):
        ops.matmul(x, np.ones((3, 2)))
    with pytest.raises(TypeError):
        x + np.ones(3)
    with pytest.raises(TypeError, match="basic indices"):
        x[[0, 1]]
