"""Causal self-attention and the pre-LN transformer block (GPT-2's layout).

Attention is composed of coop ops: Linear projections, reshape/transpose to heads, a batched
matmul for the scores, a constant additive causal mask (-inf above the diagonal), softmax,
dropout, a batched matmul with the values and the output projection. Every intermediate is a
storage the runtime may evict and recompute.
"""
import math

import numpy

from coop import ops
from coop.nn.layers import GELU, Dropout, LayerNorm, Linear
from coop.nn.module import Module, Sequential, generator, runtime_of


def causal_mask(rt, length, dtype):
    """The (T, T) additive causal mask, 0 on and below the diagonal and -inf above: one
    constant per runtime and dtype, shared by every attention layer, of the longest length
    asked so far; a shorter one is a view of its corner. Made at a model's construction
    (GPT makes it for its block size), it sits with the parameters, not among activations."""
    dtype = numpy.dtype(dtype)
    key = ("causal_mask", dtype)
    full = rt.shared.get(key)
    if full is None or full.shape[0] < length:
        full = rt.shared[key] = rt.tensor(_mask_values(rt.xp, length, dtype))
    if full.shape[0] == length:
        return full
    return ops.getitem(full, (slice(0, length), slice(0, length)))


def _mask_values(xp, length, dtype):
    """The mask's values, made where the runtime keeps arrays (xp: NumPy, CuPy's arrays on the
    device), as (length, length) comparisons of two ranges: a boolean and the result, nothing
    wider than dtype. A simulation (xp None) keeps sizes only: (shape, dtype), no values."""
    if xp is None:
        return (length, length), dtype
    index = xp.arange(length)
    return xp.where(index[:, None] < index[None, :], xp.asarray(-numpy.inf, dtype=dtype),
                    xp.asarray(0, dtype=dtype))


class CausalSelfAttention(Module):
    """Multi-head attention of each position over itself and earlier ones: x (B, T, d_model)
    -> (B, T, d_model). Projections q, k, v and proj are Linear layers with biases."""

    def __init__(self, rt, d_model, n_heads, dropout=0.0, rng=None, dtype=numpy.float32,
                 init_std=None):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
        rt, rng = runtime_of(rt), generator(rng)
        self.n_heads = n_heads
        linear = {"rng": rng, "dtype": dtype, "init_std": init_std}
        self.q = Linear(rt, d_model, d_model, **linear)
        self.k = Linear(rt, d_model, d_model, **linear)
        self.v = Linear(rt, d_model, d_model, **linear)
        self.proj = Linear(rt, d_model, d_model, **linear)
        self.attn_dropout = Dropout(dropout)
        self.resid_dropout = Dropout(dropout)

    def _heads(self, x, batch, length):
        """(B, T, C) -> (B, H, T, C / H)."""
        return ops.transpose(ops.reshape(x, (batch, length, self.n_heads, -1)), (0, 2, 1, 3))

    def mask(self, length, dtype):
        """The (T, T) additive causal mask (see causal_mask)."""
        return causal_mask(self.q.weight.runtime, length, dtype)

    def forward(self, x):
        batch, length, channels = x.shape
        q, k, v = (self._heads(f(x), batch, length) for f in (self.q, self.k, self.v))
        scores = ops.mul(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))),
                         1.0 / math.sqrt(channels // self.n_heads))
        weights = self.attn_dropout(ops.softmax(ops.add(scores, self.mask(length, x.dtype))))
        out = ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3))
        return self.resid_dropout(self.proj(ops.reshape(out, (batch, length, channels))))

    def extra_repr(self):
        return f"{self.q.in_features}, n_heads={self.n_heads}"


class TransformerBlock(Module):
    """Pre-LN block: x + attn(ln1(x)), then x + mlp(ln2(x)); the MLP is Linear(d, 4d), GELU,
    Linear(4d, d), dropout."""

    def __init__(self, rt, d_model, n_heads, dropout=0.0, rng=None, dtype=numpy.float32,
                 init_std=None):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        linear = {"rng": rng, "dtype": dtype, "init_std": init_std}
        self.ln1 = LayerNorm(rt, d_model, dtype=dtype)
        self.attn = CausalSelfAttention(rt, d_model, n_heads, dropout, **linear)
        self.ln2 = LayerNorm(rt, d_model, dtype=dtype)
        self.mlp = Sequential(Linear(rt, d_model, 4 * d_model, **linear), GELU(),
                              Linear(rt, 4 * d_model, d_model, **linear), Dropout(dropout))

    def forward(self, x):
        x = ops.add(x, self.attn(self.ln1(x)))
        return ops.add(x, self.mlp(self.ln2(x)))
