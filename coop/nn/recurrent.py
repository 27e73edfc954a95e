"""An LSTM layer: coop.ops.lstm_cell looped over time (one recorded op chain per step, so
the runtime may evict and recompute any step's states)."""
import math

import numpy

from coop import ops
from coop.nn.module import (
    Module,
    as_tensor,
    generator,
    make_parameter,
    runtime_of,
    uniform,
)


class LSTM(Module):
    """One LSTM layer. Input (T, N, D), or (N, T, D) with batch_first; returns (outputs of
    every step, same layout, (h, c) of the last step). Gates: input, forget, cell, output;
    weights w_ih (D, 4H), w_hh (H, 4H), one bias (4H,), all U(+-1/sqrt(H))."""

    def __init__(self, rt, input_size, hidden_size, batch_first=False, rng=None,
                 dtype=numpy.float32):
        super().__init__()
        rt, rng = runtime_of(rt), generator(rng)
        self.hidden_size, self.batch_first = hidden_size, batch_first
        draw = uniform(rng, 1.0 / math.sqrt(hidden_size))
        self.w_ih = make_parameter(rt, (input_size, 4 * hidden_size), dtype, draw)
        self.w_hh = make_parameter(rt, (hidden_size, 4 * hidden_size), dtype, draw)
        self.bias = make_parameter(rt, (4 * hidden_size,), dtype, draw)

    def forward(self, x, state=None):
        """x as above; state (h, c), each (N, H), zeros when None."""
        axis = 1 if self.batch_first else 0
        batch = x.shape[1 - axis]
        if state is None:
            zeros = as_tensor(x.runtime, numpy.zeros((batch, self.hidden_size), dtype=x.dtype))
            state = (zeros, zeros)
        h, c = state
        outputs = []
        for t in range(x.shape[axis]):
            step = ops.getitem(x, (slice(None), t) if self.batch_first else (t,))
            h, c = ops.lstm_cell(step, h, c, self.w_ih, self.w_hh, self.bias)
            outputs.append(h)
        return ops.stack(outputs, axis=axis), (h, c)

    def extra_repr(self):
        return f"{self.w_ih.shape[0]}, {self.hidden_size}, batch_first={self.batch_first}"
