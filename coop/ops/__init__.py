"""The op library: differentiable functions on coop Tensors.

Each op runs a forward kernel through ``coop.apply`` and records a backward node
(coop.autograd.tape) whose backward kernels also run through it, so activations and gradients
are storages the runtime may evict and recompute. Every kernel has a shape rule and a FLOP
estimate (the simulation backend runs on those) and a class: matmul, batch_matmul, conv2d,
conv2d_grad_input, conv2d_grad_weight, conv_transpose2d, conv_transpose2d_grad_input,
conv_transpose2d_grad_weight and add_n are EXPENSIVE, the rest CHEAP.

Layer: above the runtime, kernels, Tensor and the autograd tape (coop.autograd.tape); below
autograd's backward pass and Tensor's methods, coop.nn, coop.optim and coop.models.
"""
from coop.ops.conv import (
    avg_pool2d,
    conv2d,
    conv_transpose2d,
    max_pool2d,
    upsample_nearest2d,
)
from coop.ops.elementwise import (
    add,
    add_n,
    copy,
    div,
    exp,
    gelu,
    log,
    mul,
    neg,
    ones_like,
    pow,
    relu,
    sigmoid,
    sqrt,
    sub,
    tanh,
)
from coop.ops.linalg import matmul
from coop.ops.nn import (
    cross_entropy,
    dropout,
    embedding,
    log_softmax,
    lstm_cell,
    softmax,
)
from coop.ops.norm import batch_norm, layer_norm
from coop.ops.reduce import max, mean, sum, sum_to, var
from coop.ops.shape import (
    broadcast_to,
    concatenate,
    getitem,
    pad,
    reshape,
    roll,
    stack,
    transpose,
)

__all__ = ["add", "add_n", "avg_pool2d", "batch_norm", "broadcast_to", "concatenate", "conv2d",
           "conv_transpose2d", "copy", "cross_entropy", "div", "dropout", "embedding", "exp",
           "gelu", "getitem", "layer_norm", "log", "log_softmax", "lstm_cell", "matmul", "max",
           "max_pool2d", "mean", "mul", "neg", "ones_like", "pad", "pow", "relu", "reshape", "roll",
           "sigmoid", "softmax", "sqrt", "stack", "sub", "sum", "sum_to", "tanh", "transpose",
           "upsample_nearest2d", "var"]
