"""Neural-network modules on coop Tensors (see coop/nn/module.py for the conventions:
modules take the runtime first, parameters are pinned constants, initialization is seeded).

Layer: above the ops and autograd's backward pass; below coop.optim and coop.models."""
from coop.nn.layers import (
    GELU,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    MaxPool2d,
    ReLU,
    Upsample,
)
from coop.nn.module import Module, Parameter, Sequential, make_buffer, make_parameter
from coop.nn.recurrent import LSTM
from coop.nn.transformer import CausalSelfAttention, TransformerBlock

__all__ = ["GELU", "LSTM", "AvgPool2d", "BatchNorm2d", "CausalSelfAttention", "Conv2d",
           "ConvTranspose2d", "Dropout", "Embedding", "LayerNorm", "Linear", "MaxPool2d", "Module",
           "Parameter", "ReLU", "Sequential", "TransformerBlock", "Upsample", "make_buffer",
           "make_parameter"]
