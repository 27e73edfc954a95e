"""coop.optim: SGD (plain, weight decay, momentum) and AdamW against hand-written NumPy
updates (float64, to 1e-12), in-place updates through the recomputable in-place path
(storages kept, old values still recomputable), zero_grad, and optimizer state as constants."""
import re

import numpy as np
import pytest
from _gradcheck import host_runtime
from _training import step, train_tiny_gpt

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


@pytest.mark.parametrize("make, message", [
    (lambda ps: optim.SGD(ps, lr=-1.0), r"lr must be a finite number >= 0, got -1.0"),
    (lambda ps: optim.SGD(ps, lr=float("nan")), r"lr must be a finite number >= 0, got nan"),
    (lambda ps: optim.SGD(ps, lr="abc"), r"lr must be a finite number >= 0, got 'abc'"),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=-0.5), r"momentum must be a finite number >= 0"),
    (lambda ps: optim.SGD(ps, lr=0.1, weight_decay=float("inf")), r"weight_decay must be a "),
    (lambda ps: optim.AdamW(ps, betas=(0.9, 1.5)),
     r"betas\[1\] must be a finite number in \[0, 1\), got 1.5"),
    (lambda ps: optim.AdamW(ps, betas=(1.0, 1.0)),
     r"betas\[0\] must be a finite number in \[0, 1\), got 1.0"),
    (lambda ps: optim.AdamW(ps, betas=0.9), r"betas must be two numbers in \[0, 1\), got 0.9"),
    (lambda ps: optim.AdamW(ps, eps=-1), r"eps must be a finite number >= 0, got -1"),
])
def test_bad_hyperparameters_are_refused_before_any_state_is_made(make, message):
    rt, params, _ = setup()
    before = rt.stats()["ops"], len(rt.storages())
    with pytest.raises(ValueError, match=message):
        make(params)
    assert (rt.stats()["ops"], len(rt.storages())) == before


def test_params_must_be_an_iterable_of_tensors():
    rt, params, _ = setup()
    with pytest.raises(TypeError, match=r"optimizer params must be an iterable of Tensors, got "
                                        r"one Tensor; pass \[tensor\] or model.parameters\(\)"):
        optim.SGD(params[0], lr=0.1)
    for bad, name in ((np.ones(2), "ndarray"), (None, "NoneType")):
        with pytest.raises(TypeError, match=f"optimizer params must be coop Tensors, got {name} "
                                            f"at 1"):
            optim.AdamW([params[0], bad])


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
    for bad in (0, -1.0, float("nan"), "1", None):
        with pytest.raises(ValueError, match=r"clip_grad_norm: max_norm must be a number > 0, "
                                             r"got " + re.escape(repr(bad))):
            optim.clip_grad_norm(params, bad)
    assert optim.clip_grad_norm(params, float("inf")) == pytest.approx(1.0, rel=1e-6)


def test_warmup_cosine_rises_then_decays_to_its_floor():
    lrs = [optim.warmup_cosine(s, 1.0, warmup=4, total=14, final_ratio=0.1) for s in range(14)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4] == 1.0 and lrs[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert optim.warmup_cosine(9, 1.0, warmup=4, total=14, final_ratio=0.1) == \
        pytest.approx(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 5 / 9)))
    with pytest.raises(ValueError, match="need 0 <= warmup < total"):
        optim.warmup_cosine(0, 1.0, warmup=5, total=5)


# ---- updates inside the backward pass (Optimizer.backward_step) ---------------------------------

def _gpt_run(budget, opt_name, in_backward):
    """The tiny GPT on the host, 3 steps with SGD (momentum, weight decay) or AdamW."""
    import coop
    rt = coop.Runtime(coop.numpy_allocator(budget), policy="coop", cost="cpu")
    return train_tiny_gpt(rt, lambda params: optim.AdamW(params, lr=1e-2) if opt_name == "adamw"
                          else optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
                          in_backward)


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_backward_step_is_backward_then_step_bit_for_bit(opt_name):
    """Updating each parameter as its gradient completes gives the same losses and parameters,
    bit for bit, as backward() then step() and zero_grad(): unlimited, and at a budget where
    the run evicts and recomputes."""
    losses, state, stats = _gpt_run("256MiB", opt_name, False)
    got, got_state, got_stats = _gpt_run("256MiB", opt_name, True)
    assert got == losses
    for name, value in state.items():
        assert got_state[name].tobytes() == value.tobytes(), name
    small, small_state, small_stats = _gpt_run(int(0.8 * got_stats["peak_used_bytes"]),
                                               opt_name, True)
    assert small_stats["recomputes"] > 0
    assert small == losses
    for name, value in state.items():
        assert small_state[name].tobytes() == value.tobytes(), name


def test_on_grad_sees_each_leaf_once_with_its_complete_gradient():
    """backward(on_grad=f) calls f once per reached leaf, after every op that read it has sent
    its gradient (a leaf read by three ops gets the sum), while the pass still runs; a leaf
    that no gradient reaches is not passed."""
    from coop.autograd.backward import backward
    rt, (w, b), _ = setup()
    x = rt.tensor(np.arange(12.0).reshape(3, 4))
    unused = rt.tensor(np.ones(4), requires_grad=True)
    h = ops.mul(x, w)                          # w read three times, b once, at different depths
    y = ops.add(ops.mul(h, w), b)
    loss = ops.sum(ops.mul(y, w))
    reference = ops.sum(ops.mul(ops.add(ops.mul(ops.mul(x, w), w), b), w))
    reference.backward()
    want = {"w": w.grad.numpy(), "b": b.grad.numpy()}
    w.grad = b.grad = None
    seen = []

    def on_grad(leaf):
        name = "w" if leaf is w else "b" if leaf is b else "?"
        # w's gradient so far (incomplete while its first readers have not sent theirs)
        seen.append((name, leaf.grad.numpy().copy(), w.grad.numpy().copy()))

    backward(loss, on_grad=on_grad)
    assert [name for name, _, _ in seen] == ["b", "w"]
    for name, grad, _ in seen:
        np.testing.assert_array_equal(grad, want[name])
    # b was passed while the pass still ran: w's gradient then was only the outer mul's part
    assert not np.array_equal(seen[0][2], want["w"])
    assert unused.grad is None


def test_backward_step_updates_a_parameter_with_an_earlier_gradient_as_step_does():
    """A parameter this pass does not reach, holding a gradient from before, is updated after
    the pass (step() would update it too), and every gradient is dropped."""
    rt, (w, b), grads = setup()
    rt2, (w2, b2), _ = setup()
    x = rt.tensor(np.ones((3, 4)))
    x2 = rt2.tensor(np.ones((3, 4)))
    b.grad = rt.tensor(grads[0][1])
    b2.grad = rt2.tensor(grads[0][1])
    optim.SGD([w, b], lr=0.1).backward_step(ops.sum(ops.mul(x, w)))
    loss2 = ops.sum(ops.mul(x2, w2))
    loss2.backward()
    opt2 = optim.SGD([w2, b2], lr=0.1)
    opt2.step()
    opt2.zero_grad()
    for p, q in ((w, w2), (b, b2)):
        assert p.grad is None
        assert p.numpy().tobytes() == q.numpy().tobytes()


def test_backward_step_checks_its_loss():
    rt, params, _ = setup()
    opt = optim.SGD(params, lr=0.1)
    with pytest.raises(RuntimeError, match="does not require grad"):
        opt.backward_step(rt.tensor(np.ones(1)))
    with pytest.raises(RuntimeError, match="one-element tensor"):
        opt.backward_step(ops.mul(params[1], params[1]))


def test_backward_step_never_holds_every_gradient():
    """A deep stack of large weights read by a small batch: backward() then step() holds every
    weight's gradient at once, backward_step at most two (the one being updated and the next
    one made), so its peak is lower by the other layers' gradients."""
    layers, n = 8, 64
    weight = n * n * 8

    def peak(in_backward):
        rt = host_runtime("8MiB")
        rng = np.random.default_rng(0)
        ws = [rt.tensor(rng.standard_normal((n, n)) / n, requires_grad=True)
              for _ in range(layers)]
        opt = optim.SGD(ws, lr=0.1, momentum=0.9)
        h = rt.tensor(rng.standard_normal((1, n)))
        for w in ws:
            h = ops.tanh(ops.matmul(h, w))
        loss = ops.sum(h)
        del h
        step(opt, loss, in_backward)
        return rt.stats()["peak_used_bytes"], [w.numpy() for w in ws]

    full, want = peak(False)
    fused, got = peak(True)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
    assert full - fused >= (layers - 2) * weight
