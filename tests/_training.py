"""Training loops the tests share: one optimizer step after a loss, either way, and a tiny GPT
trained a few steps on a given runtime."""
import numpy as np

import coop


def step(opt, loss, in_backward=False):
    """backward(), step() and zero_grad(); or, in_backward, the same in one pass
    (Optimizer.backward_step: each parameter updated once its gradient is complete)."""
    if in_backward:
        opt.backward_step(loss)
        return
    loss.backward()
    opt.step()
    opt.zero_grad()


def train_tiny_gpt(rt, make_optimizer, in_backward=False, steps=3):
    """`steps` steps of a tiny GPT with dropout (Philox) and a tied embedding (read twice, an
    ordered index_add in its backward) on rt: its losses, final parameters and rt's stats."""
    model = coop.models.GPT(rt, 16, 32, 2, 2, 32, dropout=0.1, rng=1)
    opt = make_optimizer(model.parameters())
    idx, targets = np.random.default_rng(0).integers(0, 16, (2, 8, 32))
    losses = []
    for _ in range(steps):
        loss = model.loss(idx, targets)
        losses.append(float(loss.numpy()))
        step(opt, loss, in_backward)
        del loss
        assert all(p.grad is None for p in opt.params)
    return losses, model.state_dict(), rt.stats()
