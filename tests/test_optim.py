"""coop.optim: SGD (plain, weight decay, momentum) and AdamW against hand-written NumPy
updates (float64, to 1e-12), in-place updates through the recomputable in-place path
(storages kept, old values still recomputable), zero_grad, and optimizer state as constants."""
import numpy as np
import pytest
from _gradcheck import host_runtime

from coop import ops, optim

SHAPES = [(3, 4), (4,)]


def setup(seed=0):
    """A runtime, two float64 leaves, and four steps' gradients for them (NumPy arrays)."""
    rt = host_runtime()
    rng = np.random.default_rng(seed)
    params = [rt.tensor(rng.standard_normal(s), requires_grad=True) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(4)]
    return rt, params, grads


def run(opt_factory, steps=4, seed=0):
    rt, params, grads = setup(seed)
    opt = opt_factory(params)
    for step in range(steps):
        for p, g in zip(params, grads[step]):
            p.grad = rt.tensor(g)
        opt.step()
        opt.zero_grad()
    return [p.numpy() for p in params], grads


def reference(update, steps=4, seed=0):
    """The same parameters and gradients, updated by `update(i, p, g, t)` in NumPy."""
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(4)]
    for t in range(1, steps + 1):
        for i, p in enumerate(params):
            update(i, p, grads[t - 1][i], t)
    return params


def assert_close(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_sgd_matches_numpy(weight_decay):
    def update(i, p, g, t):
        p -= 0.1 * (g + weight_decay * p)
    got, _ = run(lambda ps: optim.SGD(ps, lr=0.1, weight_decay=weight_decay))
    assert_close(got, reference(update))


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_sgd_with_momentum_matches_numpy(weight_decay):
    buffers = {}

    def update(i, p, g, t):
        d = g + weight_decay * p
        buffers[i] = d.copy() if t == 1 else 0.9 * buffers[i] + d   # PyTorch's first step
        p -= 0.1 * buffers[i]
    got, _ = run(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=weight_decay))
    assert_close(got, reference(update))


def test_adamw_matches_numpy():
    lr, (b1, b2), eps, wd = 0.01, (0.9, 0.99), 1e-8, 0.1
    m, v = {}, {}

    def update(i, p, g, t):
        p *= 1 - lr * wd
        m[i] = b1 * m.get(i, 0) + (1 - b1) * g
        v[i] = b2 * v.get(i, 0) + (1 - b2) * g * g
        m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
        p -= lr * m_hat / (np.sqrt(v_hat) + eps)
    got, _ = run(lambda ps: optim.AdamW(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd))
    assert_close(got, reference(update))


def test_steps_update_in_place_and_state_tensors_are_constants():
    rt, params, grads = setup()
    opt = optim.AdamW(params, lr=0.1)
    sids = [p.storage.sid for p in params]
    for p, g in zip(params, grads[0]):
        p.grad = rt.tensor(g)
    opt.step()
    assert [p.storage.sid for p in params] == sids
    for t in opt.m + opt.v:
        assert t.storage.op is None and not rt.arena.storage_info(t.storage.sid)["evictable"]
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    before = [p.numpy() for p in params]
    opt.step()                                     # no gradients: nothing moves
    for p, b in zip(params, before):
        np.testing.assert_array_equal(p.numpy(), b)


def test_a_value_computed_before_a_step_recomputes_from_the_old_parameter():
    rt, params, grads = setup()
    p = params[0]
    old = p.numpy()
    y = ops.tanh(p * 2.0)                           # reads p before the step
    params[0].grad = rt.tensor(grads[0][0])
    optim.SGD([p], lr=0.5).step()
    assert not np.array_equal(p.numpy(), old)
    rt.evict(y)
    assert not y.storage.resident
    np.testing.assert_array_equal(y.numpy(), np.tanh(old * 2.0))


def test_optimizer_arguments_are_checked():
    _, params, _ = setup()
    other = host_runtime().tensor(np.ones(2), requires_grad=True)
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="different runtimes"):
        optim.SGD([params[0], other], lr=0.1)


def test_clip_grad_norm_scales_the_gradients_to_the_norm_in_place():
    rt, params, grads = setup()
    for p, g in zip(params, grads[0]):
        p.grad = rt.tensor(g * 10)
    norm = float(np.sqrt(sum(((g * 10) ** 2).sum() for g in grads[0])))
    assert optim.clip_grad_norm(params, 1.0) == pytest.approx(norm, rel=1e-12)
    clipped = [p.grad.numpy() for p in params]
    for c, g in zip(clipped, grads[0]):
        np.testing.assert_allclose(c, g * 10 / (norm + 1e-6), rtol=1e-12)
    assert optim.clip_grad_norm(params, 5.0) == pytest.approx(1.0, rel=1e-6)   # under: kept
    for c, p in zip(clipped, params):
        np.testing.assert_array_equal(p.grad.numpy(), c)
    with pytest.raises(ValueError, match="max_norm must be > 0, got 0"):
        optim.clip_grad_norm(params, 0)


def test_warmup_cosine_rises_then_decays_to_its_floor():
    lrs = [optim.warmup_cosine(s, 1.0, warmup=4, total=14, final_ratio=0.1) for s in range(14)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4] == 1.0 and lrs[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert optim.warmup_cosine(9, 1.0, warmup=4, total=14, final_ratio=0.1) == \
        pytest.approx(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 5 / 9)))
    with pytest.raises(ValueError, match="need 0 <= warmup < total"):
        optim.warmup_cosine(0, 1.0, warmup=5, total=5)
