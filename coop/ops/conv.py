"""Convolution and pooling on NCHW tensors, via sliding windows (stride tricks: no copy until
the product) and tensordot: conv2d, its gradients ("conv2d_grad_input", "conv2d_grad_weight",
EXPENSIVE in the paper's table), conv_transpose2d (its adjoint, built from the same pieces; it
and its gradients are EXPENSIVE too), max_pool2d and avg_pool2d (square windows, optional
padding) and nearest-neighbor upsampling.
"""
import numbers

import numpy

from coop.autograd.tape import record
from coop.ops._common import check_tensors, numel, op_kernel
from coop.ops.reduce import sum as reduce_sum


def _windows(xp, x, kh, kw, stride, padding, fill=0):
    """The (N, C, OH, OW, kh, kw) windows of x padded by `padding` with `fill` (a strided
    view)."""
    if padding:
        x = xp.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)),
                   constant_values=fill)
    windows = xp.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3)) \
        if xp is numpy else strided_windows(xp, x, kh, kw)
    return windows[:, :, ::stride, ::stride]


def strided_windows(xp, x, kh, kw):
    """sliding_window_view(x, (kh, kw), axis=(2, 3)) of an NCHW x, built from its shape and
    strides alone: CuPy's sliding_window_view checks the window shape through a device array
    (two waits for the device per call), as_strided makes the same view with no device work."""
    n, c, h, w = x.shape
    return xp.lib.stride_tricks.as_strided(x, (n, c, h - kh + 1, w - kw + 1, kh, kw),
                                           x.strides + x.strides[2:])


def _fold(xp, cols, shape, stride, padding):
    """Sum window-shaped cols (N, C, OH, OW, kh, kw) back onto an image of `shape`: the
    adjoint of _windows."""
    n, c, h, w = shape
    oh, ow, kh, kw = cols.shape[2:]
    out = xp.zeros((n, c, h + 2 * padding, w + 2 * padding), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += cols[:, :, :, :, i, j]
    if padding:
        out = xp.ascontiguousarray(out[:, :, padding:padding + h, padding:padding + w])
    return out


def _chunks(n, per_item, limit):
    """[i, j) ranges of the batch whose temporaries (per_item bytes per sample) stay within
    limit bytes, one sample at least: a convolution's window matrix (im2col, kh * kw times its
    input) is made a slice of the batch at a time, so a kernel holds about its output's size
    in temporaries beside its inputs and outputs rather than several times it. The ranges
    depend on the shapes alone: a recompute cuts the batch the same way."""
    if n == 0:
        return [(0, 0)]            # an empty batch: one empty slice, the result's shape
    step = max(1, min(n, limit // max(per_item, 1)))
    return [(i, min(n, i + step)) for i in range(0, n, step)]


def _by_batch(xp, shape, per_item, limit, part):
    """An array of shape (the batch first) made of part(i, j), the samples [i, j), for the
    slices _chunks cuts (samples are independent): the one part itself, C-contiguous, when
    one slice holds the batch."""
    n = shape[0]
    out = None
    for i, j in _chunks(n, per_item, limit):
        piece = part(i, j)
        if j - i == n:
            return xp.ascontiguousarray(piece)
        if out is None:
            out = xp.empty(shape, dtype=piece.dtype)
        out[i:j] = piece
    return out


def _out_size(size, k, stride, padding):
    out = (size + 2 * padding - k) // stride + 1
    if out < 1:
        raise ValueError(f"window {k} (stride {stride}, padding {padding}) does not fit in {size}")
    return out


def _conv_dims(x_shape, w_shape, stride, padding):
    (n, c, h, w), (f, c_w, kh, kw) = x_shape, w_shape
    if c != c_w:
        raise ValueError(f"conv2d: input has {c} channels, weight expects {c_w}")
    return n, f, _out_size(h, kh, stride, padding), _out_size(w, kw, stride, padding)


# ---- conv2d -----------------------------------------------------------------------------------


def _conv2d(x, w, *bias, xp, stride, padding):
    n, f, oh, ow = _conv_dims(x.shape, w.shape, stride, padding)
    c, kh, kw = w.shape[1:]
    item = xp.result_type(x, w).itemsize * oh * ow

    def part(i, j):
        cols = _windows(xp, x[i:j], kh, kw, stride, padding)
        out = xp.tensordot(cols, w, axes=((1, 4, 5), (1, 2, 3)))      # (n, OH, OW, F)
        if bias:
            out += bias[0]
        return out.transpose(0, 3, 1, 2)

    return _by_batch(xp, (n, f, oh, ow), item * (c * kh * kw + f), item * n * f, part)


def _conv2d_grad_input(g, w, xp, stride, padding, x_shape):
    n, c, h, wd = x_shape
    kh, kw = w.shape[2:]
    dtype = xp.result_type(g, w)
    per = dtype.itemsize * (g.shape[2] * g.shape[3] * c * kh * kw + c * (h + 2 * padding) *
                            (wd + 2 * padding))                        # cols, padded image

    def part(i, j):
        cols = xp.tensordot(g[i:j], w, axes=((1,), (0,)))              # (n, OH, OW, C, kh, kw)
        return _fold(xp, cols.transpose(0, 3, 1, 2, 4, 5), (j - i, c, h, wd), stride, padding)

    return _by_batch(xp, tuple(x_shape), per, dtype.itemsize * n * c * h * wd, part)


def _conv2d_grad_weight(x, g, xp, stride, padding, kernel_size):
    # sums over the batch: cut into slices, the slices' products are added in batch order
    n, kh, kw = x.shape[0], kernel_size[0], kernel_size[1]
    item = xp.result_type(x, g).itemsize * g.shape[2] * g.shape[3]
    out = None
    for i, j in _chunks(n, item * (x.shape[1] * kh * kw + g.shape[1]),
                        max(x.nbytes, g.nbytes)):
        cols = _windows(xp, x[i:j], kh, kw, stride, padding)
        part = xp.tensordot(g[i:j], cols, axes=((0, 2, 3), (0, 2, 3)))  # (F, C, kh, kw)
        del cols
        if out is None:
            out = part
        else:
            out += part
    return out


def _conv_flops(n, f, oh, ow, c, kh, kw):
    return 2.0 * n * f * oh * ow * c * kh * kw


CONV2D = op_kernel(
    _conv2d, name="conv2d",
    shape=lambda x, w, *b, stride, padding: (_conv_dims(x[0], w[0], stride, padding), x[1]),
    flops=lambda x, w, *b, stride, padding: _conv_flops(
        *_conv_dims(x[0], w[0], stride, padding), *w[0][1:]))
CONV2D_GRAD_INPUT = op_kernel(
    _conv2d_grad_input, name="conv2d_grad_input",
    shape=lambda g, w, stride, padding, x_shape: (tuple(x_shape), g[1]),
    flops=lambda g, w, stride, padding, x_shape: _conv_flops(*g[0], *w[0][1:]))
CONV2D_GRAD_WEIGHT = op_kernel(
    _conv2d_grad_weight, name="conv2d_grad_weight",
    shape=lambda x, g, stride, padding, kernel_size: ((g[0][1], x[0][1], *kernel_size), g[1]),
    flops=lambda x, g, stride, padding, kernel_size: _conv_flops(*g[0], x[0][1], *kernel_size))


def _conv_backward(grad_input, grad_weight, node, g, **input_attrs):
    """(gx, gw, gb) of a convolution-like node, through its two gradient kernels."""
    x, w = node.saved
    stride, padding = node.attrs["stride"], node.attrs["padding"]
    gx = gw = gb = None
    if node.needs[0]:
        gx = grad_input(g, w, stride=stride, padding=padding, **input_attrs)
    if node.needs[1]:
        gw = grad_weight(x, g, stride=stride, padding=padding, kernel_size=w.shape[2:])
    if len(node.needs) > 2 and node.needs[2]:
        gb = reduce_sum(g, axis=(0, 2, 3))
    return gx, gw, gb


def _conv2d_backward(node, g):
    return _conv_backward(CONV2D_GRAD_INPUT, CONV2D_GRAD_WEIGHT, node, g,
                          x_shape=node.saved[0].shape)


def conv2d(x, w, b=None, stride=1, padding=0):
    """Cross-correlation of x (N, C, H, W) with w (F, C, kh, kw) plus bias b (F,), zero
    padding and stride the same along H and W -> (N, F, OH, OW)."""
    inputs = check_tensors("conv2d", x, w, *(() if b is None else (b,)))
    if x.ndim != 4 or w.ndim != 4 or (b is not None and b.shape != w.shape[:1]):
        raise ValueError(f"conv2d: x (N, C, H, W), w (F, C, kh, kw), b (F,); got {x.shape}, "
                         f"{w.shape}{'' if b is None else ', ' + str(b.shape)}")
    attrs = dict(stride=int(stride), padding=int(padding))
    return record(CONV2D(*inputs, **attrs), inputs, _conv2d_backward, saved=(x, w),
                  name="conv2d", **attrs)


# ---- conv_transpose2d: the adjoint of conv2d ---------------------------------------------------


def _transpose_dims(x_shape, w_shape, stride, padding):
    (n, c, h, w), (c_w, f, kh, kw) = x_shape, w_shape
    if c != c_w:
        raise ValueError(f"conv_transpose2d: input has {c} channels, weight expects {c_w}")
    oh, ow = (h - 1) * stride - 2 * padding + kh, (w - 1) * stride - 2 * padding + kw
    if oh < 1 or ow < 1:
        raise ValueError(f"conv_transpose2d: padding {padding} leaves no output for a {h}x{w} "
                         f"input, a {kh}x{kw} kernel and stride {stride}")
    return n, f, oh, ow


def _conv_transpose2d(x, w, *bias, xp, stride, padding):
    shape = _transpose_dims(x.shape, w.shape, stride, padding)
    out = _conv2d_grad_input(x, w, xp, stride, padding, shape)         # a fresh array
    if bias:
        out += bias[0][:, None, None]
    return out


def _transpose_flops(x, w, *rest, **attrs):
    return _conv_flops(*x[0], *w[0][1:])


CONV_TRANSPOSE2D = op_kernel(
    _conv_transpose2d, name="conv_transpose2d",
    shape=lambda x, w, *b, stride, padding: (_transpose_dims(x[0], w[0], stride, padding), x[1]),
    flops=_transpose_flops)
# d/dx is conv2d of the output gradient with the same weight; d/dw is conv2d's weight gradient
# with the roles of input and output gradient swapped
CONV_TRANSPOSE2D_GRAD_INPUT = op_kernel(
    _conv2d, name="conv_transpose2d_grad_input",
    shape=lambda g, w, stride, padding: (_conv_dims(g[0], w[0], stride, padding), g[1]),
    flops=lambda g, w, stride, padding: _conv_flops(
        *_conv_dims(g[0], w[0], stride, padding), *w[0][1:]))
CONV_TRANSPOSE2D_GRAD_WEIGHT = op_kernel(
    lambda x, g, xp, stride, padding, kernel_size:
    _conv2d_grad_weight(g, x, xp, stride, padding, kernel_size),
    name="conv_transpose2d_grad_weight",
    shape=lambda x, g, stride, padding, kernel_size: ((x[0][1], g[0][1], *kernel_size), x[1]),
    flops=lambda x, g, stride, padding, kernel_size: _conv_flops(*x[0], g[0][1], *kernel_size))


def _conv_transpose2d_backward(node, g):
    return _conv_backward(CONV_TRANSPOSE2D_GRAD_INPUT, CONV_TRANSPOSE2D_GRAD_WEIGHT, node, g)


def conv_transpose2d(x, w, b=None, stride=1, padding=0):
    """Transposed convolution (PyTorch's): x (N, C_in, H, W), w (C_in, C_out, kh, kw), bias b
    (C_out,) -> (N, C_out, (H - 1) * stride - 2 * padding + kh, likewise W): the adjoint of
    conv2d, each input pixel scattering its kernel-weighted copy onto the output."""
    inputs = check_tensors("conv_transpose2d", x, w, *(() if b is None else (b,)))
    if x.ndim != 4 or w.ndim != 4 or (b is not None and b.shape != w.shape[1:2]):
        raise ValueError(f"conv_transpose2d: x (N, C_in, H, W), w (C_in, C_out, kh, kw), "
                         f"b (C_out,); got {x.shape}, {w.shape}"
                         f"{'' if b is None else ', ' + str(b.shape)}")
    stride, padding = int(stride), int(padding)
    if stride < 1 or padding < 0:
        raise ValueError(f"conv_transpose2d: need stride >= 1 and padding >= 0, got stride "
                         f"{stride}, padding {padding}")
    _transpose_dims(x.shape, w.shape, stride, padding)                 # raises on a mismatch
    attrs = dict(stride=stride, padding=padding)
    return record(CONV_TRANSPOSE2D(*inputs, **attrs), inputs, _conv_transpose2d_backward,
                  saved=(x, w), name="conv_transpose2d", **attrs)


# ---- pooling ----------------------------------------------------------------------------------


def _pool_dims(x_shape, k, stride, padding):
    n, c, h, w = x_shape
    return n, c, _out_size(h, k, stride, padding), _out_size(w, k, stride, padding)


def _pool_rule(x, k, stride, padding):
    return _pool_dims(x[0], k, stride, padding), x[1]


def _pool_flops(x, *rest, k, stride, padding, **attrs):
    return float(numel(_pool_dims(x[0], k, stride, padding)) * k * k)


def _max_pool(x, xp, k, stride, padding):
    # padding is -inf, so a window's maximum is always a real element (padding <= k // 2)
    return _windows(xp, x, k, k, stride, padding, fill=-xp.inf).max(axis=(4, 5))


def _max_pool_backward(x, g, xp, k, stride, padding):
    n, c, oh, ow = g.shape
    flat = _windows(xp, x, k, k, stride, padding, fill=-xp.inf).reshape(n, c, oh, ow, k * k)
    picked = flat.argmax(axis=-1)[..., None] == xp.arange(k * k)      # the first maximum
    return _fold(xp, (picked * g[..., None]).reshape(n, c, oh, ow, k, k), x.shape, stride,
                 padding)


def _avg_pool_backward(g, xp, k, stride, padding, x_shape):
    cols = xp.broadcast_to((g / (k * k))[..., None, None], g.shape + (k, k))
    return _fold(xp, cols, x_shape, stride, padding)


MAX_POOL = op_kernel(_max_pool, name="max_pool2d", shape=_pool_rule, flops=_pool_flops)
AVG_POOL = op_kernel(lambda x, xp, k, stride, padding:
                     _windows(xp, x, k, k, stride, padding).mean(axis=(4, 5)),
                     name="avg_pool2d", shape=_pool_rule, flops=_pool_flops)
MAX_POOL_BACKWARD = op_kernel(_max_pool_backward, name="max_pool2d_backward",
                              shape=lambda x, g, k, stride, padding: x, flops=_pool_flops)
AVG_POOL_BACKWARD = op_kernel(_avg_pool_backward, name="avg_pool2d_backward",
                              shape=lambda g, k, stride, padding, x_shape: (tuple(x_shape), g[1]),
                              flops=lambda g, k, stride, padding, x_shape:
                              float(numel(g[0]) * k * k))


def _max_pool_grad(node, g):
    return (MAX_POOL_BACKWARD(node.saved[0], g, **node.attrs),)


def _avg_pool_grad(node, g):
    return (AVG_POOL_BACKWARD(g, x_shape=node.shapes[0], **node.attrs),)


def _pool(kernel, backward, x, k, stride, padding):
    name = kernel.name
    check_tensors(name, x)
    if x.ndim != 4:
        raise ValueError(f"{name}: x must be (N, C, H, W), got {x.shape}")
    k, stride, padding = int(k), int(k if stride is None else stride), int(padding)
    if k < 1 or stride < 1 or not 0 <= padding <= k // 2:
        raise ValueError(f"{name}: need window k >= 1, stride >= 1 and 0 <= padding <= k // 2, "
                         f"got k={k}, stride={stride}, padding={padding}")
    if min(x.shape[2:]) + 2 * padding < k:
        raise ValueError(f"{name}: window {k} does not fit in {x.shape[2:]} padded by {padding}")
    attrs = dict(k=k, stride=stride, padding=padding)
    saved = (x,) if kernel is MAX_POOL else ()
    return record(kernel(x, **attrs), (x,), backward, saved=saved, name=name, **attrs)


def max_pool2d(x, k, stride=None, padding=0):
    """Maximum over k x k windows of x (N, C, H, W), stride k unless given, padded with -inf
    (padding <= k // 2); the gradient goes to the first maximum of each window."""
    return _pool(MAX_POOL, _max_pool_grad, x, k, stride, padding)


def avg_pool2d(x, k, stride=None, padding=0):
    """Mean over k x k windows of x (N, C, H, W), stride k unless given, zero-padded (padding
    <= k // 2); padded zeros count in the mean (PyTorch's count_include_pad=True)."""
    return _pool(AVG_POOL, _avg_pool_grad, x, k, stride, padding)


# ---- upsampling -------------------------------------------------------------------------------


def _upsample(x, xp, scale):
    n, c, h, w = x.shape
    out = xp.empty((n, c, h, scale, w, scale), dtype=x.dtype)   # a fresh array, also at scale 1
    out[...] = x[:, :, :, None, :, None]
    return out.reshape(n, c, h * scale, w * scale)


def _upsample_backward(g, xp, scale):
    n, c, h, w = g.shape
    return g.reshape(n, c, h // scale, scale, w // scale, scale).sum(axis=(3, 5))


UPSAMPLE = op_kernel(_upsample, name="upsample_nearest2d",
                     shape=lambda x, scale: ((*x[0][:2], x[0][2] * scale, x[0][3] * scale), x[1]),
                     flops=lambda x, scale: float(numel(x[0]) * scale * scale))
UPSAMPLE_BACKWARD = op_kernel(_upsample_backward, name="upsample_nearest2d_backward",
                              shape=lambda g, scale: ((*g[0][:2], g[0][2] // scale,
                                                       g[0][3] // scale), g[1]),
                              flops=lambda g, scale: float(numel(g[0])))


def _upsample_grad(node, g):
    return (UPSAMPLE_BACKWARD(g, **node.attrs),)


def upsample_nearest2d(x, scale):
    """x (N, C, H, W) -> (N, C, H * scale, W * scale): each pixel repeated in a scale x scale
    block (nearest neighbor, integer scale)."""
    check_tensors("upsample_nearest2d", x)
    if x.ndim != 4:
        raise ValueError(f"upsample_nearest2d: x must be (N, C, H, W), got {x.shape}")
    if not isinstance(scale, numbers.Integral) or isinstance(scale, bool) or scale < 1:
        raise ValueError(f"upsample_nearest2d: scale must be an int >= 1, got {scale!r}")
    scale = int(scale)
    return record(UPSAMPLE(x, scale=scale), (x,), _upsample_grad, name="upsample_nearest2d",
                  scale=scale)
