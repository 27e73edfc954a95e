"""Basic layers: Linear, Embedding, LayerNorm, BatchNorm2d, Conv2d, ConvTranspose2d, pooling,
Upsample, Dropout and activations.

Weights are stored in the layout the ops take directly: Linear's weight is (in, out) so the
forward is ``x @ W + b`` without a transpose. Default initializations follow PyTorch's
(uniform(+-1/sqrt(fan_in)) for Linear, Conv2d and ConvTranspose2d, N(0, 1) for Embedding);
``init_std`` draws N(0, std^2) instead (GPT-2 uses 0.02).
"""
import math

import numpy

from coop import ops
from coop._checks import check_number
from coop.nn.module import (
    Module,
    as_tensor,
    check_sizes,
    constant,
    generator,
    make_buffer,
    make_parameter,
    normal,
    runtime_of,
    uniform,
)


class Linear(Module):
    """y = x @ weight + bias for x (..., in_features); weight (in, out), bias (out,)."""

    def __init__(self, rt, in_features, out_features, bias=True, rng=None, dtype=numpy.float32,
                 init_std=None):
        super().__init__()
        check_sizes("Linear", in_features=in_features, out_features=out_features)
        rt, rng = runtime_of(rt), generator(rng)
        self.in_features, self.out_features = in_features, out_features
        draw = uniform(rng, 1.0 / math.sqrt(in_features)) if init_std is None \
            else normal(rng, init_std)
        self.weight = make_parameter(rt, (in_features, out_features), dtype, draw)
        self.bias = make_parameter(rt, (out_features,), dtype,
                                   draw if init_std is None else constant(0.0)) if bias else None

    def forward(self, x):
        y = ops.matmul(x, self.weight)
        return y if self.bias is None else ops.add(y, self.bias)

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """Rows of weight (num, dim) for integer indices (a Tensor or an int array) -> (*, dim)."""

    def __init__(self, rt, num_embeddings, embedding_dim, rng=None, dtype=numpy.float32,
                 init_std=1.0):
        super().__init__()
        check_sizes("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = make_parameter(rt, (num_embeddings, embedding_dim), dtype,
                                     normal(generator(rng), init_std))

    def forward(self, indices):
        return ops.embedding(self.weight, as_tensor(self.weight.runtime, indices,
                                                    self.num_embeddings, "embedding ids"))

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalize over the trailing dims `shape`, then scale (ones) and shift (zeros)."""

    def __init__(self, rt, shape, eps=1e-5, dtype=numpy.float32):
        super().__init__()
        shape = (shape,) if isinstance(shape, (int, numpy.integer)) else tuple(shape)
        check_sizes("LayerNorm", **{f"shape[{i}]": d for i, d in enumerate(shape)})
        self.eps = eps
        self.weight = make_parameter(rt, shape, dtype, constant(1.0))
        self.bias = make_parameter(rt, shape, dtype, constant(0.0))

    def forward(self, x):
        return ops.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.weight.shape}, eps={self.eps}"


class BatchNorm2d(Module):
    """Per-channel normalization of (N, C, H, W): batch statistics in training (and the
    running_mean/running_var buffers move toward them in place), running statistics in eval."""

    def __init__(self, rt, channels, momentum=0.1, eps=1e-5, dtype=numpy.float32):
        super().__init__()
        check_sizes("BatchNorm2d", channels=channels)
        self.momentum, self.eps = momentum, eps
        self.weight = make_parameter(rt, (channels,), dtype, constant(1.0))
        self.bias = make_parameter(rt, (channels,), dtype, constant(0.0))
        self.register_buffer("running_mean", make_buffer(rt, (channels,), dtype, 0.0))
        self.register_buffer("running_var", make_buffer(rt, (channels,), dtype, 1.0))

    def forward(self, x):
        return ops.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                              training=self.training, momentum=self.momentum, eps=self.eps)

    def extra_repr(self):
        return f"{self.weight.shape[0]}"


def _check_conv(owner, in_channels, out_channels, kernel_size, stride, padding):
    check_sizes(owner, in_channels=in_channels, out_channels=out_channels,
                kernel_size=kernel_size, stride=stride)
    check_sizes(owner, minimum=0, padding=padding)


class _Conv(Module):
    """A square-kernel convolution's parameters: weight of weight_shape, bias (out,), both
    U(+-1/sqrt(fan_in)) as PyTorch's."""

    def __init__(self, rt, weight_shape, fan_in, out_channels, stride, padding, bias, rng,
                 dtype):
        super().__init__()
        rng = generator(rng)
        self.stride, self.padding = stride, padding
        draw = uniform(rng, 1.0 / math.sqrt(fan_in))
        self.weight = make_parameter(rt, weight_shape, dtype, draw)
        self.bias = make_parameter(rt, (out_channels,), dtype, draw) if bias else None


class Conv2d(_Conv):
    """2-D cross-correlation of NCHW input with a square kernel; weight (out, in, k, k)."""

    def __init__(self, rt, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 bias=True, rng=None, dtype=numpy.float32):
        _check_conv(type(self).__name__, in_channels, out_channels, kernel_size, stride, padding)
        k = kernel_size
        super().__init__(rt, (out_channels, in_channels, k, k), in_channels * k * k,
                         out_channels, stride, padding, bias, rng, dtype)

    def forward(self, x):
        return ops.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding)

    def extra_repr(self):
        f, c, k, _ = self.weight.shape
        return f"{c}, {f}, kernel_size={k}, stride={self.stride}, padding={self.padding}"


class ConvTranspose2d(_Conv):
    """2-D transposed convolution of NCHW input with a square kernel; weight (in, out, k, k)
    as PyTorch's, whose fan_in (for the initial bound) is out * k * k."""

    def __init__(self, rt, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 bias=True, rng=None, dtype=numpy.float32):
        _check_conv(type(self).__name__, in_channels, out_channels, kernel_size, stride, padding)
        k = kernel_size
        super().__init__(rt, (in_channels, out_channels, k, k), out_channels * k * k,
                         out_channels, stride, padding, bias, rng, dtype)

    def forward(self, x):
        return ops.conv_transpose2d(x, self.weight, self.bias, stride=self.stride,
                                    padding=self.padding)

    def extra_repr(self):
        c, f, k, _ = self.weight.shape
        return f"{c}, {f}, kernel_size={k}, stride={self.stride}, padding={self.padding}"


class _Pool2d(Module):
    """A pooling layer's window, stride (k unless given) and padding."""

    def __init__(self, k, stride=None, padding=0):
        super().__init__()
        owner = type(self).__name__
        check_sizes(owner, k=k)
        if stride is not None:
            check_sizes(owner, stride=stride)
        check_sizes(owner, minimum=0, padding=padding)
        self.k, self.stride, self.padding = k, stride, padding

    def extra_repr(self):
        return f"{self.k}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_Pool2d):
    """Maximum over k x k windows, padded with -inf."""

    def forward(self, x):
        return ops.max_pool2d(x, self.k, self.stride, self.padding)


class AvgPool2d(_Pool2d):
    """Mean over k x k windows, padded zeros counted (PyTorch's count_include_pad=True)."""

    def forward(self, x):
        return ops.avg_pool2d(x, self.k, self.stride, self.padding)


class Upsample(Module):
    """Nearest-neighbor upsampling of NCHW input by an integer scale."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ops.upsample_nearest2d(x, self.scale)

    def extra_repr(self):
        return f"scale={self.scale}"


class Dropout(Module):
    """Zero elements with probability p while training (the mask replays on recompute)."""

    def __init__(self, p=0.5):
        super().__init__()
        check_number("Dropout: p", p, below=1.0)
        self.p = p

    def forward(self, x):
        return ops.dropout(x, self.p, training=self.training)

    def extra_repr(self):
        return f"p={self.p}"


class ReLU(Module):
    def forward(self, x):
        return ops.relu(x)


class GELU(Module):
    """GELU, tanh approximation (GPT-2's)."""

    def forward(self, x):
        return ops.gelu(x)
