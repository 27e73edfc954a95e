"""coop.nn: every layer's forward against plain NumPy, parameter gradients against central
finite differences (float64, small sizes), registration order, state_dict round trips,
train/eval switching dropout and batch norm, seeded initialization, pinned parameters."""
import math

import numpy as np
import pytest
from _gradcheck import host_runtime, np_conv_transpose2d

import coop
from coop import nn, ops

F64 = {"dtype": np.float64}


def np_layer_norm(x, w, b, eps=1e-5):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_attention(x, s, n_heads):
    """Causal multi-head attention with the weights of a state_dict s (prefix stripped)."""
    b, t, c = x.shape
    q, k, v = ((x @ s[f"{n}.weight"] + s[f"{n}.bias"]).reshape(b, t, n_heads, -1)
               .transpose(0, 2, 1, 3) for n in "qkv")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(c // n_heads)
    scores = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, scores)
    out = (np_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
    return out @ s["proj.weight"] + s["proj.bias"]


def np_sigmoid(z):
    return 1 / (1 + np.exp(-z))


def np_lstm(x, s, hidden):
    h = c = np.zeros((x.shape[1], hidden))
    outs = []
    for step in x:
        gates = step @ s["w_ih"] + h @ s["w_hh"] + s["bias"]
        i, f, g, o = np.split(gates, 4, axis=1)
        c = np_sigmoid(f) * c + np_sigmoid(i) * np.tanh(g)
        h = np_sigmoid(o) * np.tanh(c)
        outs.append(h)
    return np.stack(outs), h, c


def sub_state(state, prefix):
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


# ---- forward against NumPy ----------------------------------------------------------------


def test_linear_embedding_layer_norm_and_sequential_match_numpy():
    rt = host_runtime()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4))
    lin = nn.Linear(rt, 4, 5, rng=0, **F64)
    s = lin.state_dict()
    np.testing.assert_allclose(lin(rt.tensor(x)).numpy(), x @ s["weight"] + s["bias"], rtol=1e-12)
    assert nn.Linear(rt, 4, 5, bias=False).bias is None
    emb = nn.Embedding(rt, 7, 3, rng=0, **F64)
    idx = np.array([[0, 6], [3, 3]])
    np.testing.assert_array_equal(emb(idx).numpy(), emb.state_dict()["weight"][idx])
    ln = nn.LayerNorm(rt, 4, **F64)
    ln.load_state_dict({"weight": rng.standard_normal(4), "bias": rng.standard_normal(4)})
    s = ln.state_dict()
    np.testing.assert_allclose(ln(rt.tensor(x)).numpy(), np_layer_norm(x, s["weight"], s["bias"]),
                               rtol=1e-12, atol=1e-12)
    seq = nn.Sequential(nn.Linear(rt, 4, 6, rng=1, **F64), nn.GELU(),
                        nn.Linear(rt, 6, 2, rng=2, **F64), nn.ReLU())
    s = seq.state_dict()
    want = np.maximum(np_gelu(x @ s["0.weight"] + s["0.bias"]) @ s["2.weight"] + s["2.bias"], 0)
    np.testing.assert_allclose(seq(rt.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)
    assert len(seq) == 4 and isinstance(seq[1], nn.GELU)


def test_conv2d_matches_numpy():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 5))
    conv = nn.Conv2d(rt, 3, 4, 3, stride=2, padding=1, rng=0, **F64)
    s = conv.state_dict()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    want = np.einsum("nchwij,fcij->nfhw", windows, s["weight"]) + s["bias"][:, None, None]
    np.testing.assert_allclose(conv(rt.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)


def test_conv_transpose2d_matches_numpy_with_pytorchs_layout_and_init():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 3))
    up = nn.ConvTranspose2d(rt, 3, 4, 3, stride=2, padding=1, rng=0, **F64)
    s = up.state_dict()
    assert s["weight"].shape == (3, 4, 3, 3) and s["bias"].shape == (4,)
    bound = 1 / math.sqrt(4 * 3 * 3)                 # PyTorch's fan_in: out * k * k
    assert np.abs(s["weight"]).max() <= bound and np.abs(s["weight"]).max() > 0.9 * bound
    out = up(rt.tensor(x))
    assert out.shape == (2, 4, 7, 5)                 # (H - 1) * stride - 2 * padding + k
    np.testing.assert_allclose(out.numpy(), np_conv_transpose2d(x, s["weight"], s["bias"], 2, 1),
                               rtol=1e-12, atol=1e-12)
    assert nn.ConvTranspose2d(rt, 3, 4, 2, bias=False).num_parameters() == 3 * 4 * 2 * 2


def test_pooling_and_upsample_layers_match_numpy():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 6))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(nn.MaxPool2d(3, 2, padding=1)(rt.tensor(x)).numpy(),
                                  windows.max(axis=(4, 5)))
    want = x.reshape(2, 3, 2, 2, 3, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(nn.AvgPool2d(2)(rt.tensor(x)).numpy(), want, rtol=1e-12)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    np.testing.assert_allclose(nn.AvgPool2d(3, 1, 1)(rt.tensor(x)).numpy(),
                               windows.mean(axis=(4, 5)), rtol=1e-12)
    np.testing.assert_array_equal(nn.Upsample(2)(rt.tensor(x)).numpy(),
                                  x.repeat(2, axis=2).repeat(2, axis=3))
    assert "padding=1" in repr(nn.MaxPool2d(3, 2, 1)) and "scale=2" in repr(nn.Upsample(2))


def test_batch_norm_uses_batch_statistics_in_training_and_running_ones_in_eval():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((4, 3, 2, 2)) * 2 + 1
    bn = nn.BatchNorm2d(rt, 3, momentum=0.1, **F64)
    axes = (0, 2, 3)
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    np.testing.assert_allclose(bn(rt.tensor(x)).numpy(), (x - mean) / np.sqrt(var + 1e-5),
                               rtol=1e-10, atol=1e-12)
    running_mean = 0.1 * x.mean(axes)
    running_var = 0.9 + 0.1 * x.var(axes, ddof=1)
    s = bn.state_dict()
    np.testing.assert_allclose(s["running_mean"], running_mean, rtol=1e-12)
    np.testing.assert_allclose(s["running_var"], running_var, rtol=1e-12)
    assert bn.eval() is bn and not bn.training
    want = (x - running_mean[:, None, None]) / np.sqrt(running_var[:, None, None] + 1e-5)
    np.testing.assert_allclose(bn(rt.tensor(x)).numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(bn.state_dict()["running_mean"], running_mean)   # unchanged


def test_dropout_is_active_in_training_only():
    rt = host_runtime()
    x = rt.tensor(np.ones((100, 100)))
    drop = nn.Dropout(0.25)
    y = drop(x).numpy()
    assert set(np.unique(y)) == {0.0, 1 / 0.75} and 0.2 < (y == 0).mean() < 0.3
    drop.eval()
    assert drop(x) is x


def test_attention_matches_numpy_and_is_causal():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((2, 5, 8))
    attn = nn.CausalSelfAttention(rt, 8, 2, dropout=0.0, rng=0, **F64)
    got = attn(rt.tensor(x)).numpy()
    np.testing.assert_allclose(got, np_attention(x, attn.state_dict(), 2), rtol=1e-10, atol=1e-12)
    changed = x.copy()
    changed[:, 3:] += 1.0                      # the future does not reach earlier positions
    np.testing.assert_array_equal(attn(rt.tensor(changed)).numpy()[:, :3], got[:, :3])
    with pytest.raises(ValueError, match="multiple"):
        nn.CausalSelfAttention(rt, 6, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_causal_mask_values_dtype_and_sharing(make_rt, dtype):
    from coop.nn.transformer import causal_mask
    rt = make_rt("1MiB")
    full = causal_mask(rt, 6, dtype)
    want = np.where(np.arange(6)[:, None] < np.arange(6)[None, :], -np.inf, 0.0).astype(dtype)
    assert full.dtype == dtype and full.shape == (6, 6)
    np.testing.assert_array_equal(full.numpy(), want)
    assert causal_mask(rt, 6, dtype) is full            # one per runtime and dtype
    corner = causal_mask(rt, 4, dtype)                  # a shorter one: the corner of it
    np.testing.assert_array_equal(corner.numpy(), want[:4, :4])
    longer = causal_mask(rt, 8, dtype)                  # a longer one replaces it
    assert longer.shape == (8, 8) and causal_mask(rt, 6, dtype) is not full
    np.testing.assert_array_equal(causal_mask(rt, 6, dtype).numpy(), want)


def test_causal_mask_of_a_simulation_has_no_values():
    # a simulation keeps sizes only: its 64 MiB mask is a size, no (T, T) array on the host
    import tracemalloc

    from coop.nn.transformer import causal_mask
    rt = coop.Runtime(coop.SimBackend("1GiB"), cost="cpu")
    tracemalloc.start()
    try:
        mask = causal_mask(rt, 1 << 12, np.float32)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert mask.shape == (1 << 12, 1 << 12) and mask.dtype == np.float32
    assert rt.stats()["used_bytes"] == 4 << 24
    assert peak < 1 << 20       # NumPy's buffers are traced: the mask's would be 64 MiB


def test_transformer_block_is_pre_layer_norm():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((2, 4, 8))
    block = nn.TransformerBlock(rt, 8, 2, rng=0, **F64)
    s = block.state_dict()
    h = x + np_attention(np_layer_norm(x, s["ln1.weight"], s["ln1.bias"]), sub_state(s, "attn."), 2)
    m = np_layer_norm(h, s["ln2.weight"], s["ln2.bias"])
    hidden = np_gelu(m @ s["mlp.0.weight"] + s["mlp.0.bias"])
    want = h + hidden @ s["mlp.2.weight"] + s["mlp.2.bias"]
    np.testing.assert_allclose(block(rt.tensor(x)).numpy(), want, rtol=1e-10, atol=1e-12)


def test_lstm_matches_numpy_in_both_layouts():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((4, 2, 3))        # (T, N, D)
    lstm = nn.LSTM(rt, 3, 5, rng=0, **F64)
    want, h_want, c_want = np_lstm(x, lstm.state_dict(), 5)
    out, (h, c) = lstm(rt.tensor(x))
    for got, ref in ((out, want), (h, h_want), (c, c_want)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)
    first = nn.LSTM(rt, 3, 5, batch_first=True, rng=0, **F64)
    out, _ = first(rt.tensor(x.transpose(1, 0, 2)))
    np.testing.assert_allclose(out.numpy(), want.transpose(1, 0, 2), rtol=1e-12, atol=1e-12)


def test_bidirectional_lstm_runs_a_second_set_of_weights_over_the_reversed_sequence():
    rt = host_runtime()
    x = np.random.default_rng(1).standard_normal((4, 2, 3))        # (T, N, D)
    lstm = nn.LSTM(rt, 3, 5, bidirectional=True, rng=0, **F64)
    names = [n for n, _ in lstm.named_parameters()]
    assert names == ["w_ih", "w_hh", "bias", "w_ih_reverse", "w_hh_reverse", "bias_reverse"]
    assert lstm.num_parameters() == 2 * (3 * 20 + 5 * 20 + 20)
    s = lstm.state_dict()
    fwd, h_f, c_f = np_lstm(x, s, 5)
    rev, h_b, c_b = np_lstm(x[::-1], {k: s[k + "_reverse"] for k in ("w_ih", "w_hh", "bias")}, 5)
    out, ((h, c), (h_r, c_r)) = lstm(rt.tensor(x))
    want = np.concatenate([fwd, rev[::-1]], axis=-1)
    for got, ref in ((out, want), (h, h_f), (c, c_f), (h_r, h_b), (c_r, c_b)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)
    first = nn.LSTM(rt, 3, 5, batch_first=True, bidirectional=True, rng=0, **F64)
    out, _ = first(rt.tensor(x.transpose(1, 0, 2)))
    np.testing.assert_allclose(out.numpy(), want.transpose(1, 0, 2), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="LSTM: x must be"):
        lstm(rt.tensor(np.ones((4, 2, 2))))


# ---- gradients against finite differences -----------------------------------------------


def finite_difference_check(build, x, eps=1e-6):
    """Parameter gradients of sum(module(x) * weight) by backward and by central differences,
    each evaluation in a fresh runtime with the same seed (dropout replays its mask)."""
    rt = host_runtime("64MiB")
    module = build(rt)
    out = module(rt.tensor(x))
    out = out[0] if isinstance(out, tuple) else out
    weight = np.random.default_rng(7).standard_normal(out.shape)
    out.backward(rt.tensor(weight))
    analytic = {name: p.grad.numpy() for name, p in module.named_parameters()}
    state = module.state_dict()

    def value(moved):
        rt = host_runtime("64MiB")
        m = build(rt)
        m.load_state_dict(moved)
        y = m(rt.tensor(x))
        return np.sum((y[0] if isinstance(y, tuple) else y).numpy() * weight)

    for name, grad in analytic.items():
        numeric = np.zeros_like(grad)
        for index in np.ndindex(grad.shape):
            values = []
            for sign in (1, -1):
                moved = {k: v.copy() for k, v in state.items()}
                moved[name][index] += sign * eps
                values.append(value(moved))
            numeric[index] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7, err_msg=name)


GRADIENT_CASES = {
    "linear": (lambda rt: nn.Linear(rt, 3, 2, rng=0, **F64), (4, 3)),
    "layer_norm": (lambda rt: nn.LayerNorm(rt, 4, **F64), (3, 4)),
    "attention": (lambda rt: nn.CausalSelfAttention(rt, 4, 2, dropout=0.25, rng=0, **F64),
                  (2, 3, 4)),
    "lstm": (lambda rt: nn.LSTM(rt, 3, 2, batch_first=True, rng=0, **F64), (2, 3, 3)),
    "lstm/bidirectional": (lambda rt: nn.LSTM(rt, 2, 2, bidirectional=True, rng=0, **F64),
                           (3, 2, 2)),
    "conv_transpose2d": (lambda rt: nn.ConvTranspose2d(rt, 2, 3, 3, stride=2, padding=1, rng=0,
                                                       **F64), (2, 2, 3, 2)),
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_parameter_gradients_match_finite_differences(name):
    build, shape = GRADIENT_CASES[name]
    finite_difference_check(build, np.random.default_rng(3).standard_normal(shape))


# ---- modules: registration, state, modes, initialization -----------------------------------


class Net(nn.Module):
    def __init__(self, rt):
        super().__init__()
        self.a = nn.Linear(rt, 2, 3, rng=0)
        self.scale = nn.make_parameter(rt, (3,), np.float32, np.ones)
        self.body = nn.Sequential(nn.Dropout(0.5), nn.BatchNorm2d(rt, 3))
        self.tag = "not a parameter"


def test_parameters_are_registered_in_order_and_modes_reach_every_module():
    rt = host_runtime()
    net = Net(rt)
    names = [n for n, _ in net.named_parameters()]
    assert names == ["a.weight", "a.bias", "scale", "body.1.weight", "body.1.bias"]
    assert net.parameters()[2] is net.scale and net.num_parameters() == 6 + 3 + 3 + 3 + 3
    assert set(net.state_dict()) == set(names) | {"body.1.running_mean", "body.1.running_var"}
    net.eval()
    assert not any(m.training for _, m in net.named_modules())
    net.train()
    assert all(m.training for _, m in net.named_modules())
    net.scale = None                               # reassigning unregisters
    assert "scale" not in dict(net.named_parameters())


def test_parameters_are_pinned_constants_that_require_grad():
    rt = host_runtime()
    p = nn.Linear(rt, 2, 3).weight
    assert isinstance(p, nn.Parameter) and p.requires_grad and p.storage.op is None
    assert not rt.arena.storage_info(p.storage.sid)["evictable"]
    assert type(p.detach()) is coop.Tensor and not p.detach().requires_grad


def test_state_dict_round_trip_copies_in_place():
    rt = host_runtime()
    src, dst = nn.TransformerBlock(rt, 8, 2, rng=1), nn.TransformerBlock(rt, 8, 2, rng=2)
    x = rt.tensor(np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32))
    sids = [p.storage.sid for p in dst.parameters()]
    assert not np.array_equal(src(x).numpy(), dst(x).numpy())
    dst.load_state_dict(src.state_dict())
    assert [p.storage.sid for p in dst.parameters()] == sids
    np.testing.assert_array_equal(src(x).numpy(), dst(x).numpy())
    state = src.state_dict()
    for k, v in dst.state_dict().items():
        np.testing.assert_array_equal(v, state[k])
    with pytest.raises(KeyError, match="missing"):
        dst.load_state_dict({})
    state["ln1.weight"] = np.ones(3)
    with pytest.raises(ValueError, match="shape"):
        dst.load_state_dict(state)


@pytest.mark.parametrize("make, message", [
    (lambda rt: nn.Linear(rt, 0, 3), r"Linear: in_features must be an int >= 1, got 0"),
    (lambda rt: nn.Linear(rt, 2, -1), r"Linear: out_features must be an int >= 1, got -1"),
    (lambda rt: nn.Linear(rt, 2.5, 3), r"Linear: in_features must be an int >= 1, got 2.5"),
    (lambda rt: nn.Embedding(rt, 10, 0), r"Embedding: embedding_dim must be an int >= 1"),
    (lambda rt: nn.LayerNorm(rt, (4, 0)), r"LayerNorm: shape\[1\] must be an int >= 1, got 0"),
    (lambda rt: nn.BatchNorm2d(rt, 0), r"BatchNorm2d: channels must be an int >= 1, got 0"),
    (lambda rt: nn.Conv2d(rt, 3, 4, 3, stride=0), r"Conv2d: stride must be an int >= 1, got 0"),
    (lambda rt: nn.Conv2d(rt, 3, 4, 0), r"Conv2d: kernel_size must be an int >= 1, got 0"),
    (lambda rt: nn.ConvTranspose2d(rt, 3, 4, 3, padding=-1),
     r"ConvTranspose2d: padding must be an int >= 0, got -1"),
    (lambda rt: nn.MaxPool2d(2, stride=0), r"MaxPool2d: stride must be an int >= 1, got 0"),
    (lambda rt: nn.LSTM(rt, 0, 4), r"LSTM: input_size must be an int >= 1, got 0"),
    (lambda rt: nn.Dropout("a"), r"Dropout: p must be a finite number in \[0, 1\), got 'a'"),
    (lambda rt: nn.Dropout(1.0), r"Dropout: p must be a finite number in \[0, 1\), got 1.0"),
])
def test_layer_sizes_are_checked_when_a_layer_is_made(make, message):
    rt = host_runtime()
    before = len(rt.storages())
    with pytest.raises(ValueError, match=message):
        make(rt)
    assert len(rt.storages()) == before       # no parameter was made
    with pytest.raises(TypeError, match=r"coop.nn layers take a coop.Runtime first \(None: the "
                                        r"active one\), got str"):
        nn.Linear("x", 4, 3)


def test_sequential_refuses_what_is_not_a_module():
    rt = host_runtime()
    for bad, name in ((lambda x: x * 100, "function"), (3, "int")):
        with pytest.raises(TypeError, match=f"Sequential takes coop.nn Modules, got {name} at 1"):
            nn.Sequential(nn.Linear(rt, 4, 4, rng=0), bad)
    assert len(nn.Sequential(nn.Linear(rt, 4, 4, rng=0), nn.Linear(rt, 4, 2, rng=1))) == 2


def test_a_refused_state_dict_changes_nothing_and_tensors_load_too():
    rt = host_runtime()
    m, other = nn.Linear(rt, 2, 3, rng=0), nn.Linear(rt, 2, 3, rng=1)
    before = m.state_dict()
    bad_shape = {"weight": np.full((2, 3), 7, np.float32), "bias": np.zeros(4, np.float32)}
    bad_dtype = {"weight": np.full((2, 3), 7, np.float32), "bias": np.array(["a", "b", "c"])}
    for state, message in ((bad_shape, r"bias has shape \(3,\), got \(4,\)"),
                           (bad_dtype, r"bias has dtype float32, got <U1, which does not convert "
                                       r"to it; give float32 values")):
        with pytest.raises(ValueError, match="load_state_dict: " + message):
            m.load_state_dict(state)
        for k, v in m.state_dict().items():     # the weight was not written before the refusal
            np.testing.assert_array_equal(v, before[k])
    # another module's Tensors load as their values
    m.load_state_dict({"weight": other.weight, "bias": other.bias})
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, other.state_dict()[k])
    rt.arena.check()


def test_initialization_is_seeded_and_the_active_runtime_is_picked_up():
    rt = host_runtime()
    a, b, c = (nn.CausalSelfAttention(rt, 8, 2, rng=seed) for seed in (5, 5, 6))
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k])
    assert not np.array_equal(a.state_dict()["q.weight"], c.state_dict()["q.weight"])
    with rt:
        lin = nn.Linear(None, 2, 2)
    assert lin.weight.runtime is rt
    y = ops.sum(lin(rt.tensor(np.ones((1, 2), np.float32))))
    y.backward()
    assert lin.weight.grad.shape == (2, 2)


def test_modules_build_on_a_simulation_backend_without_memory():
    rt = coop.Runtime(coop.SimBackend("1GiB"), cost="cpu")
    lin = nn.Linear(rt, 4096, 4096)
    assert lin.weight.shape == (4096, 4096) and lin.num_parameters() == 4096 * 4097
    assert rt.arena.stats()["used_bytes"] >= 4096 * 4097 * 4


def test_new_layers_run_forward_and_backward_in_simulation():
    """U-Net's decoder step and a BiLSTM at paper sizes, on (shape, dtype) specs only."""
    rt = coop.Runtime(coop.SimBackend("4GiB"), cost="cpu")
    x = rt.tensor(((8, 512, 32, 32), np.float32), requires_grad=True)
    decoder = nn.Sequential(nn.ConvTranspose2d(rt, 512, 256, 2, stride=2), nn.MaxPool2d(3, 1, 1),
                            nn.AvgPool2d(3, 1, 1), nn.Upsample(2))
    y = decoder(x)
    assert y.shape == (8, 256, 128, 128)
    ops.sum(y).backward()
    assert x.grad.shape == x.shape and decoder[0].weight.grad.shape == (512, 256, 2, 2)
    lstm = nn.LSTM(rt, 300, 256, batch_first=True, bidirectional=True)
    out, ((h, _), (h_r, _)) = lstm(rt.tensor(((16, 20, 300), np.float32)))
    assert out.shape == (16, 20, 512) and h.shape == h_r.shape == (16, 256)
    ops.sum(out).backward()
    assert lstm.w_hh_reverse.grad.shape == (256, 1024)
