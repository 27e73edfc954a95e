"""Swin Transformer (Liu et al. 2021) in torchvision's layout (swin_t: 28,288,354 parameters).

A 4x4/4 patch-embedding convolution and LayerNorm; stages of pre-LN blocks whose attention
runs within 7x7 windows (every second block's windows shifted by 3 with coop.ops.roll, and
masked so a window attends only within its regions), with a learned relative position bias
per head (a (2w - 1)^2 x heads table indexed by a constant); patch merging (2x2 neighbors
concatenated, LayerNorm, Linear halving 4C to 2C) between stages; a final LayerNorm, global
average pool and Linear head.

Differences from torchvision that change no parameter: no stochastic depth (torchvision's
swin_t drops residual branches with probability up to 0.2 while training), GELU is the tanh
approximation, and attention scales the scores rather than the queries. As torchvision, a
stage whose map is no larger than the window (7x7 at 224x224) does not shift.
"""
import numpy

from coop import ops
from coop.models._attention import attend
from coop.models._classifier import Classifier
from coop.nn import GELU, Conv2d, LayerNorm, Linear, Sequential
from coop.nn.module import (
    Module,
    as_tensor,
    constant,
    generator,
    make_parameter,
    runtime_of,
)


def relative_position_index(window):
    """(w^2, w^2) indices into the (2w - 1)^2 bias table: the offset between two positions."""
    coords = numpy.stack(numpy.meshgrid(numpy.arange(window), numpy.arange(window),
                                        indexing="ij")).reshape(2, -1)
    offsets = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (window - 1)
    return (offsets[..., 0] * (2 * window - 1) + offsets[..., 1]).astype(numpy.int64)


def shift_mask(height, width, window, shift):
    """(windows, w^2, w^2) additive mask of a shifted map: -100 between positions that came
    from different regions of the unshifted map, 0 within one (torchvision's)."""
    regions = numpy.zeros((height, width))
    bounds = ((0, -window), (-window, -shift), (-shift, None))
    for i, (h0, h1) in enumerate(bounds):
        for j, (w0, w1) in enumerate(bounds):
            regions[h0:h1, w0:w1] = 3 * i + j
    regions = regions.reshape(height // window, window, width // window, window)
    regions = regions.transpose(0, 2, 1, 3).reshape(-1, window * window)
    return numpy.where(regions[:, None, :] != regions[:, :, None], -100.0, 0.0)


class WindowAttention(Module):
    """Multi-head attention within (shifted) windows of x (B, H, W, C) -> (B, H, W, C)."""

    def __init__(self, rt, dim, n_heads, window, shift, rng, dtype):
        super().__init__()
        self.n_heads, self.window, self.shift = n_heads, window, shift
        self.qkv = Linear(rt, dim, 3 * dim, rng=rng, dtype=dtype)
        self.proj = Linear(rt, dim, dim, rng=rng, dtype=dtype)
        self.relative_position_bias_table = make_parameter(
            rt, ((2 * window - 1) ** 2, n_heads), dtype, constant(0.0))
        self.index = as_tensor(rt, relative_position_index(window))
        self._masks = {}   # (H, W) -> constant (windows, 1, w^2, w^2) mask

    def mask(self, height, width, dtype):
        if (height, width) not in self._masks:
            m = shift_mask(height, width, self.window, self.shift)[:, None].astype(dtype)
            self._masks[height, width] = as_tensor(self.qkv.weight.runtime, m)
        return self._masks[height, width]

    def forward(self, x):
        batch, height, width, dim = x.shape
        w = self.window
        shift = self.shift if min(height, width) > w else 0
        if shift:
            x = ops.roll(x, (-shift, -shift), (1, 2))
        x = ops.reshape(x, (batch, height // w, w, width // w, w, dim))
        x = ops.reshape(ops.transpose(x, (0, 1, 3, 2, 4, 5)), (batch, -1, w * w, dim))
        qkv = ops.reshape(self.qkv(x), (batch, x.shape[1], w * w, 3, self.n_heads, -1))
        qkv = ops.transpose(qkv, (3, 0, 1, 4, 2, 5))          # (3, B, windows, heads, w^2, d)
        q, k, v = (ops.getitem(qkv, i) for i in range(3))
        bias = ops.transpose(ops.embedding(self.relative_position_bias_table, self.index),
                             (2, 0, 1))                       # (heads, w^2, w^2)
        if shift:
            bias = ops.add(bias, self.mask(height, width, x.dtype))
        out = ops.transpose(attend(q, k, v, bias), (0, 1, 3, 2, 4))   # (B, windows, w^2, ...)
        out = self.proj(ops.reshape(out, (batch, -1, w * w, dim)))
        out = ops.reshape(out, (batch, height // w, width // w, w, w, dim))
        out = ops.reshape(ops.transpose(out, (0, 1, 3, 2, 4, 5)), (batch, height, width, dim))
        return ops.roll(out, (shift, shift), (1, 2)) if shift else out


class SwinBlock(Module):
    """x + attn(norm1(x)), then x + mlp(norm2(x)); the MLP is Linear(C, 4C), GELU,
    Linear(4C, C)."""

    def __init__(self, rt, dim, n_heads, window, shift, rng, dtype):
        super().__init__()
        self.norm1 = LayerNorm(rt, dim, dtype=dtype)
        self.attn = WindowAttention(rt, dim, n_heads, window, shift, rng, dtype)
        self.norm2 = LayerNorm(rt, dim, dtype=dtype)
        self.mlp = Sequential(Linear(rt, dim, 4 * dim, rng=rng, dtype=dtype), GELU(),
                              Linear(rt, 4 * dim, dim, rng=rng, dtype=dtype))

    def forward(self, x):
        x = ops.add(x, self.attn(self.norm1(x)))
        return ops.add(x, self.mlp(self.norm2(x)))


class PatchMerging(Module):
    """(B, H, W, C) -> (B, H/2, W/2, 2C): each 2x2 neighborhood concatenated (4C, in
    torchvision's order), LayerNorm, Linear without bias."""

    def __init__(self, rt, dim, rng, dtype):
        super().__init__()
        self.norm = LayerNorm(rt, 4 * dim, dtype=dtype)
        self.reduction = Linear(rt, 4 * dim, 2 * dim, bias=False, rng=rng, dtype=dtype)

    def forward(self, x):
        even, odd = slice(0, None, 2), slice(1, None, 2)
        parts = [ops.getitem(x, (slice(None), h, w)) for h, w in
                 ((even, even), (odd, even), (even, odd), (odd, odd))]
        return self.reduction(self.norm(ops.concatenate(parts, axis=-1)))


class SwinTransformer(Classifier):
    """forward(x (N, C, H, W)) -> logits (N, num_classes)."""

    def __init__(self, rt, patch=4, embed_dim=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24),
                 window=7, num_classes=1000, in_channels=3, rng=None, dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        self.patch_embed = Conv2d(rt, in_channels, embed_dim, patch, stride=patch, rng=rng,
                                  dtype=dtype)
        self.patch_norm = LayerNorm(rt, embed_dim, dtype=dtype)
        stages, dim = [], embed_dim
        for i, (depth, n_heads) in enumerate(zip(depths, heads)):
            stages += [SwinBlock(rt, dim, n_heads, window, window // 2 if j % 2 else 0, rng,
                                 dtype) for j in range(depth)]
            if i < len(depths) - 1:
                stages.append(PatchMerging(rt, dim, rng, dtype))
                dim *= 2
        self.stages = Sequential(*stages)
        self.norm = LayerNorm(rt, dim, dtype=dtype)
        self.head = Linear(rt, dim, num_classes, rng=rng, dtype=dtype)

    def forward(self, x):
        x = self.patch_norm(ops.transpose(self.patch_embed(x), (0, 2, 3, 1)))
        x = self.norm(self.stages(x))
        return self.head(ops.mean(x, axis=(1, 2)))


def swin_t(rt, num_classes=1000, **options):
    """Swin-T: embed 96, depths (2, 2, 6, 2), heads (3, 6, 12, 24), window 7 (28,288,354
    parameters at 1000 classes)."""
    return SwinTransformer(rt, num_classes=num_classes, **options)
