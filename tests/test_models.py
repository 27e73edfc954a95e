"""coop.models: published parameter counts (GPT-2, ResNet-18/50, built on a simulation
backend: no memory), forward against NumPy (MLP) and causality (GPT), a few training steps of
a tiny GPT and a tiny ResNet with decreasing loss, bit-identical training under eviction for
coop, dtr and dte at 0.5x and 0.3x of the unlimited run's peak, and a 1,000-step loop whose
storages and arena bytes stay bounded."""
import itertools

import numpy as np
import pytest
from _gradcheck import host_runtime

import coop
from coop import models, ops, optim


def sim_runtime(budget="8GiB"):
    """A simulation runtime: sizes and costs only (no memory behind the budget)."""
    return coop.Runtime(coop.SimBackend(budget), cost="cpu")


# ---- parameter counts --------------------------------------------------------------------


@pytest.mark.parametrize("build, count", [
    (lambda rt: models.resnet50(rt, num_classes=1000), 25_557_032),      # torchvision
    (lambda rt: models.resnet18(rt, num_classes=1000), 11_689_512),      # torchvision
    (lambda rt: models.GPT(rt, 50257, 1024, 12, 12, 768), 124_439_808),  # GPT-2 (124M)
    (lambda rt: models.GPT(rt, 50257, 1024, 24, 16, 1024), 354_823_168),  # GPT-2 medium
])
def test_published_parameter_counts(build, count):
    rt = sim_runtime()
    model = build(rt)
    assert model.num_parameters() == count
    assert rt.backend.xp is None   # specs only: nothing was allocated or drawn


def test_gpt_parameter_count_at_any_size():
    rt = host_runtime()
    vocab, block, layers, heads, d = 11, 6, 3, 2, 8
    gpt = models.GPT(rt, vocab, block, layers, heads, d)
    assert gpt.num_parameters() == layers * (12 * d * d + 13 * d) + (vocab + block + 2) * d
    untied = models.GPT(rt, vocab, block, layers, heads, d, tie_weights=False)
    assert untied.num_parameters() == gpt.num_parameters() + d * vocab


def test_gpt_refuses_token_ids_that_are_not_batch_by_time():
    rt = host_runtime()
    gpt = models.GPT(rt, 11, 6, 1, 2, 8)
    ids = np.arange(5) % 11
    with pytest.raises(ValueError, match=r"GPT takes token ids of shape \(batch, time\), got "
                                         r"shape \(5,\); for one sequence pass ids\[None\]"):
        gpt.loss(ids, ids)
    assert gpt(ids[None]).shape == (1, 5, 11)


@pytest.mark.parametrize("name", ["resnet50", "gpt2"])
def test_full_size_models_run_forward_and_backward_in_simulation(name):
    rt = sim_runtime()
    if name == "resnet50":
        model = models.resnet50(rt)
        logits = model(rt.tensor(((2, 3, 224, 224), np.float32)))
        assert logits.shape == (2, 1000)
        loss = ops.mean(logits)
    else:
        model = models.GPT(rt, 50257, 1024, 12, 12, 768, dropout=0.1)
        loss = model.loss(np.zeros((2, 1024), int), np.zeros((2, 1024), int))
    loss.backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())


# ---- forward -----------------------------------------------------------------------------


def test_mlp_matches_numpy():
    rt = host_runtime()
    mlp = models.MLP(rt, [4, 6, 5, 3], rng=0, dtype=np.float64)
    s = mlp.state_dict()
    x = np.random.default_rng(1).standard_normal((2, 4))
    h = np.maximum(x @ s["layers.0.weight"] + s["layers.0.bias"], 0)
    h = np.maximum(h @ s["layers.2.weight"] + s["layers.2.bias"], 0)
    np.testing.assert_allclose(mlp(rt.tensor(x)).numpy(),
                               h @ s["layers.4.weight"] + s["layers.4.bias"], rtol=1e-12)


def test_gpt_logits_do_not_see_later_tokens():
    rt = host_runtime()
    gpt = models.GPT(rt, 10, 8, 2, 2, 8, rng=0)
    idx = np.random.default_rng(0).integers(0, 10, (2, 8))
    logits = gpt(idx).numpy()
    assert logits.shape == (2, 8, 10)
    changed = idx.copy()
    changed[:, 5:] = (changed[:, 5:] + 1) % 10
    np.testing.assert_array_equal(gpt(changed).numpy()[:, :5], logits[:, :5])
    with pytest.raises(ValueError, match="block size"):
        gpt(np.zeros((1, 9), int))


# ---- training ----------------------------------------------------------------------------


def train_gpt(budget, policy, steps=3, config=(8, 32, 8, 2, 8), batch=8, dropout=0.1):
    """A tiny GPT (vocab, block, layers, heads, d_model) trained by AdamW on fixed random
    tokens; returns the losses, the final state and the runtime's stats."""
    rt = host_runtime(budget, policy)
    vocab, block = config[:2]
    model = models.GPT(rt, *config, dropout=dropout, rng=1)
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    idx, targets = rng.integers(0, vocab, (2, batch, block))
    losses = []
    for _ in range(steps):
        loss = model.loss(idx, targets)
        losses.append(float(loss.numpy()))
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    return losses, model.state_dict(), rt.stats()


def test_a_tiny_gpt_learns():
    losses, _, _ = train_gpt("64MiB", "coop", steps=8, config=(8, 8, 1, 2, 16), batch=4)
    assert all(b < a for a, b in itertools.pairwise(losses)), losses


def test_a_tiny_resnet_learns():
    rt = host_runtime("64MiB")
    model = models.ResNet(rt, layers=[1, 1], block="basic", width=4, num_classes=3, stem="small",
                          rng=0)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 8, 8)).astype(np.float32)
    targets = rng.integers(0, 3, 8)
    losses = []
    for _ in range(6):
        loss = model.loss(rt.tensor(x), targets)
        losses.append(float(loss.numpy()))
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
    assert losses[-1] < 0.5 * losses[0], losses
    model.eval()
    assert model(rt.tensor(x)).shape == (8, 3)
    bottleneck = models.ResNet(rt, [1, 1], "bottleneck", width=2, num_classes=3, rng=0)
    assert bottleneck(rt.tensor(rng.standard_normal((2, 3, 16, 16)).astype(np.float32))).shape \
        == (2, 3)


@pytest.fixture(scope="module")
def unlimited():
    losses, state, stats = train_gpt("64MiB", "coop")
    assert stats["recomputes"] == 0
    return losses, state, stats["peak_used_bytes"], stats["used_bytes"]


@pytest.mark.parametrize("ratio", [0.5, 0.3])
@pytest.mark.parametrize("policy", ["coop", "dtr", "dte"])
def test_gpt_training_is_bit_identical_under_eviction(unlimited, policy, ratio):
    losses, state, peak, used = unlimited
    got_losses, got_state, stats = train_gpt(int(ratio * peak), policy)
    assert stats["recomputes"] > 0 and stats["demotions"] > 0
    assert stats["peak_used_bytes"] <= ratio * peak
    # what the program released is freed by the end of each step, the recomputed
    # dependencies kept (demoted) during it included: the parameters and AdamW's state remain
    assert stats["used_bytes"] == used
    assert got_losses == losses
    for name, value in state.items():
        np.testing.assert_array_equal(got_state[name], value, err_msg=name)


def train_mlp(budget, steps=1000):
    """A narrow MLP with dropout trained by AdamW; (storages, arena used bytes) after steps
    50 and 1,000, and the stats."""
    rt = host_runtime(budget)
    model = models.MLP(rt, [16] + [16] * 5 + [10], dropout=0.1, rng=0)
    opt = optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = rt.tensor(rng.standard_normal((256, 16)).astype(np.float32))
    targets = rng.integers(0, 10, 256)
    seen = {}
    for step in range(1, steps + 1):
        loss = model.loss(x, targets)
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad()
        if step in (50, steps):
            seen[step] = (len(rt.storages()), rt.arena.stats()["used_bytes"])
    return seen, rt.stats()


def test_a_long_training_loop_stays_bounded():
    seen, stats = train_mlp("64MiB")
    assert seen[50] == seen[1000] and stats["recomputes"] == 0
    seen, stats = train_mlp(int(0.6 * stats["peak_used_bytes"]))
    assert seen[50] == seen[1000] and stats["recomputes"] > 0


def _train_gpt_keeping_the_loss(keep_loss, steps=3):
    rt = coop.Runtime(coop.numpy_allocator("64MiB"), cost="cpu")
    model = models.GPT(rt, 13, 8, 2, 2, 16, rng=0)
    opt = coop.optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        x = rng.integers(0, 13, size=(4, 8))
        loss = model.loss(x, np.roll(x, -1, axis=1))
        losses.append(float(loss.numpy()))
        loss.backward()
        assert loss.storage.op is None          # a constant now, its value kept where it was
        if not keep_loss:
            del loss
        opt.step()
        opt.zero_grad()
    rt.arena.check()
    return rt.arena.stats()["used_bytes"], len(rt.storages()), losses


def test_holding_the_loss_after_backward_keeps_no_graph_alive():
    """backward() turns a resident root into a constant where it is: a loss kept across the
    optimizer step holds its own piece only, not the forward graph's records (which made AdamW's
    in-place updates keep a copy of every parameter they read)."""
    used, storages, losses = _train_gpt_keeping_the_loss(keep_loss=False)
    used_kept, storages_kept, losses_kept = _train_gpt_keeping_the_loss(keep_loss=True)
    assert losses_kept == losses
    assert storages_kept == storages + 1
    assert used_kept == used + 64               # the loss: one 8-byte value, a 64-byte piece
