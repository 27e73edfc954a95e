"""The autograd engine (coop/autograd.py) on the host runtime: leaves and requires_grad,
accumulation, broadcasting, no_grad and detach, errors, a 10,000-op chain without recursion,
the graph's release after backward, and bit-identical training under eviction."""
import sys

import numpy as np
import pytest
from _gradcheck import deep_mlp, deep_mlp_loss, host_runtime

import coop
from coop import ops


def used(rt):
    return rt.arena.stats()["used_bytes"]


def grads(*tensors):
    return [t.grad.numpy() for t in tensors]


# ---- leaves, accumulation, broadcasting -------------------------------------------------------


def test_a_tensor_used_twice_accumulates_its_gradient():
    rt = host_runtime()
    x_np = np.array([1.0, -2.0, 3.0])
    x = rt.tensor(x_np, requires_grad=True)
    ((x * x + x) * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 4 * x_np + 2)
    assert x.grad.grad_fn is None and not x.grad.requires_grad


def test_backward_adds_to_existing_grads_and_retain_graph_allows_a_second_pass():
    rt = host_runtime()
    x = rt.tensor(np.array([1.0, 2.0]), requires_grad=True)
    w = rt.tensor(np.array([3.0, 5.0]), requires_grad=True)
    loss = (x * w).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 10.0])
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])
    with pytest.raises(RuntimeError, match="a second time"):
        loss.backward()


def test_every_leaf_gets_a_gradient_storage_of_its_own():
    rt = host_runtime()
    x, y = (rt.tensor(np.ones(3), requires_grad=True) for _ in range(2))
    (x + y).sum().backward()
    assert x.grad.storage != y.grad.storage
    for g in grads(x, y):
        np.testing.assert_array_equal(g, np.ones(3))


def test_broadcast_inputs_get_gradients_of_their_own_shape():
    rt = host_runtime()
    a = rt.tensor(np.arange(3.0).reshape(3, 1), requires_grad=True)
    b = rt.tensor(np.arange(4.0), requires_grad=True)
    c = rt.tensor(np.array([2.0]), requires_grad=True)
    (a * b + c).sum().backward()
    assert [g.shape for g in grads(a, b, c)] == [(3, 1), (4,), (1,)]
    np.testing.assert_array_equal(a.grad.numpy(), np.full((3, 1), 6.0))
    np.testing.assert_array_equal(b.grad.numpy(), np.full(4, 3.0))
    np.testing.assert_array_equal(c.grad.numpy(), [12.0])


def test_requires_grad_flows_from_leaves_and_stops_at_constants_no_grad_and_detach():
    rt = host_runtime()
    x = rt.tensor(np.ones(2), requires_grad=True)
    k = rt.tensor(np.full(2, 3.0))
    assert x.requires_grad and x.grad_fn is None and not k.requires_grad
    assert (k * 2.0).grad_fn is None and not (k * 2.0).requires_grad
    y = x * k
    assert y.requires_grad and y.grad_fn is not None
    with coop.no_grad():
        assert not coop.is_grad_enabled()
        z = x * k
        assert not z.requires_grad and z.grad_fn is None
    assert coop.is_grad_enabled()
    d = y.detach()
    assert d.storage == y.storage and d.grad_fn is None and not d.requires_grad
    (y + d).sum().backward()                  # no gradient flows through the detached handle
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    assert k.grad is None


def test_backward_of_a_leaf_stores_the_given_gradient():
    rt = host_runtime()
    x = rt.tensor(np.ones(2), requires_grad=True)
    x.backward(rt.tensor(np.array([4.0, 5.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 5.0])


def test_backward_takes_an_array_as_its_gradient():
    rt = host_runtime()
    x = rt.tensor(np.arange(3.0), requires_grad=True)
    (x * 2.0).backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])


@pytest.mark.parametrize("call, error, message", [
    (lambda rt, x: (x * 2.0).backward(), RuntimeError, "one-element tensor"),
    (lambda rt, x: rt.tensor(np.ones(1)).backward(), RuntimeError, "does not require grad"),
    (lambda rt, x: x.sum().backward(rt.tensor(np.ones(2))), ValueError, "gradient of shape"),
    (lambda rt, x: (x * 2.0).backward(np.ones(4)), ValueError,
     r"gradient of shape \(4,\) for a tensor of shape \(3,\)"),
    (lambda rt, x: (x * 2.0).backward(host_runtime().tensor(np.ones(3))), ValueError,
     "the gradient belongs to another coop.Runtime than the tensor"),
    (lambda rt, x: rt.tensor(x), TypeError, "Runtime.tensor takes array data, and this is a "
                                            "coop.Tensor already"),
])
def test_backward_errors(call, error, message):
    rt = host_runtime()
    with pytest.raises(error, match=message):
        call(rt, rt.tensor(np.ones(3), requires_grad=True))


def test_operators_match_the_op_functions():
    rt = host_runtime()
    a_np, b_np = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, -1.0], [2.0, 1.5]])
    a, b = rt.tensor(a_np), rt.tensor(b_np)
    cases = [(a + b, a_np + b_np), (a - b, a_np - b_np), (a * b, a_np * b_np),
             (a / b, a_np / b_np), (-a, -a_np), (a ** 2, a_np ** 2), (a @ b, a_np @ b_np),
             (a.T, a_np.T), (a.reshape(4), a_np.reshape(4)), (a[1:, :1], a_np[1:, :1]),
             (a.sum(0), a_np.sum(0)), (a.mean(), a_np.mean()), (a.max(1), a_np.max(1)),
             (a.var(1, keepdims=True), a_np.var(1, keepdims=True)), (a.exp(), np.exp(a_np)),
             (a.log(), np.log(a_np)), (a.sqrt(), np.sqrt(a_np)), (b.relu(), np.maximum(b_np, 0)),
             (np.float64(2.0) * a, 2.0 * a_np), (1.0 - a, 1.0 - a_np), (a.transpose(1, 0), a_np.T)]
    for got, want in cases:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
    f32 = rt.tensor(a_np.astype(np.float32))
    assert (np.float64(2.0) * f32).dtype == np.float32 and (f32 / 3).dtype == np.float32


def test_a_kernel_output_in_permuted_memory_order_is_adopted_without_a_copy():
    """Regression (arrays.flat_bytes): a ufunc on a transposed input returns a dense array in
    another axis order; its storage must be that array's memory, not a reshaped copy."""
    rt = host_runtime()
    x_np = np.arange(24.0).reshape(2, 3, 4)
    y = rt.apply(coop.Kernel(lambda a: np.exp(a.transpose(1, 2, 0)), name="exp_t"), rt.tensor(x_np))
    assert y.storage.nbytes == x_np.nbytes
    np.testing.assert_array_equal(y.numpy(), np.exp(x_np.transpose(1, 2, 0)))
    rt.evict(y)
    np.testing.assert_array_equal(y.numpy(), np.exp(x_np.transpose(1, 2, 0)))


# ---- long chains and releasing the graph ------------------------------------------------------


def test_a_10000_op_chain_backprops_without_recursion(no_gc):
    """tanh(1.5 y), 5,000 times: 10,000 ops, each saving what its backward reads."""
    rt = host_runtime("64MiB")
    x_np = np.array([1.0, 0.5, -2.0])
    x = rt.tensor(x_np, requires_grad=True)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(_frames()) + 60)
    try:
        y = x
        for _ in range(5_000):
            y = ops.tanh(y * 1.5)
        y.sum().backward()
        del y                               # the chain's records die without recursion
    finally:
        sys.setrecursionlimit(limit)
    value, grad = x_np, np.ones(3)
    for _ in range(5_000):
        value = np.tanh(1.5 * value)
        grad *= 1.5 * (1 - value * value)
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-10, atol=1e-300)
    x.grad = None
    assert rt.storages() == [x.storage.sid]   # only the leaf is left


def _frames():
    frame, frames = sys._getframe(), []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _saved_storages(root):
    """Ids of the computed storages that the graph's nodes saved."""
    storages, stack, seen = set(), [root.grad_fn], set()
    while stack:
        node = stack.pop()
        storages.update(t.storage.sid for t in node.saved if t.storage.op is not None)
        for edge in node.edges:
            if isinstance(edge, coop.autograd.tape.Node) and edge not in seen:
                seen.add(edge)
                stack.append(edge)
    return sorted(storages)


@pytest.mark.parametrize("retain", [False, True])
def test_backward_releases_the_graph_unless_retained(no_gc, retain):
    rt = host_runtime()
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((64, 32)))
    w1, w2 = (rt.tensor(rng.standard_normal(s), requires_grad=True) for s in ((32, 32), (32, 4)))
    loss = (ops.tanh(x @ w1) @ w2).mean()   # x @ w1 is released at once: tanh saves its output
    saved = _saved_storages(loss)
    assert len(saved) == 1 and rt._engine.resident(saved[0])
    before, saved_bytes = used(rt), rt._engine.info(saved[0])["nbytes"]
    loss.backward(retain_graph=retain)
    grad_bytes = w1.grad.storage.nbytes + w2.grad.storage.nbytes
    assert used(rt) == before + grad_bytes - (0 if retain else saved_bytes)
    assert (saved[0] in rt.storages() and rt._engine.resident(saved[0])) == retain
    del loss
    w1.grad = w2.grad = None
    assert saved[0] not in rt.storages()    # the records that needed it died with the grads
    assert rt.storages() == sorted(t.storage.sid for t in (x, w1, w2))
    assert used(rt) == sum(t.storage.nbytes for t in (x, w1, w2))


# ---- training under eviction ------------------------------------------------------------------


def _sgd(p, g, lr):
    p -= lr * g


SGD = coop.Kernel(_sgd, name="sgd_", inplace=0)


def train(budget, policy, steps=3, depth=48, width=16, batch=256):
    """A deep, narrow ReLU MLP (activations dominate its constants) trained by SGD; returns
    the losses, the final parameters and the runtime's stats."""
    rt = host_runtime(budget, policy)
    x, targets, params = deep_mlp(rt, depth, width, batch)
    losses = []
    for _ in range(steps):
        loss = deep_mlp_loss(x, targets, params)
        losses.append(loss.numpy())
        loss.backward()
        del loss
        for p in params:
            rt.apply(SGD, p, p.grad, lr=0.1)
            p.grad = None
    return losses, [p.numpy() for p in params], rt.stats()


def test_training_is_bit_identical_under_eviction_for_every_policy():
    losses, params, stats = train("64MiB", "coop")
    assert stats["recomputes"] == 0 and losses[-1] < losses[0]
    peak = stats["peak_used_bytes"]
    # DTR's baselines keep each mutated parameter's first old version (DTR's in-place rule)
    for policy, ratios in (("coop", (0.5, 0.4)), ("dtr", (0.6, 0.5)), ("dte", (0.6, 0.5))):
        for ratio in ratios:
            got_losses, got_params, got_stats = train(int(ratio * peak), policy)
            assert got_stats["recomputes"] > 0, (policy, ratio)
            assert got_stats["peak_used_bytes"] <= ratio * peak
            assert [float(v) for v in got_losses] == [float(v) for v in losses], (policy, ratio)
            for got, want in zip(got_params, params):
                np.testing.assert_array_equal(got, want)
