"""A multi-layer perceptron: Linear layers with an activation (and optional dropout) between."""
import itertools

import numpy

from coop.models._classifier import Classifier
from coop.nn import GELU, Dropout, Linear, ReLU, Sequential
from coop.nn.module import generator, runtime_of

ACTIVATIONS = {"relu": ReLU, "gelu": GELU}


class MLP(Classifier):
    """sizes = (in, hidden..., out): Linear(sizes[i], sizes[i + 1]) layers, the activation
    (and dropout, when > 0) after all but the last. ``loss(x, targets)``: cross entropy."""

    def __init__(self, rt, sizes, activation="relu", dropout=0.0, rng=None, dtype=numpy.float32):
        super().__init__()
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least (in, out) sizes, got {sizes}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        rt, rng = runtime_of(rt), generator(rng)
        layers = []
        for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
            layers.append(Linear(rt, n_in, n_out, rng=rng, dtype=dtype))
            if i < len(sizes) - 2:
                layers.append(ACTIVATIONS[activation]())
                if dropout:
                    layers.append(Dropout(dropout))
        self.layers = Sequential(*layers)

    def forward(self, x):
        return self.layers(x)
