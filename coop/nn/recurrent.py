"""An LSTM layer: coop.ops.lstm_cell looped over time (one recorded op chain per step, so
the runtime may evict and recompute any step's states), in one or both directions."""
import math

import numpy

from coop import ops
from coop.nn.module import (
    Module,
    as_tensor,
    check_sizes,
    generator,
    make_parameter,
    runtime_of,
    uniform,
)


class LSTM(Module):
    """One LSTM layer. Input (T, N, D), or (N, T, D) with batch_first; returns (outputs of
    every step, same layout, (h, c) of the last step). Gates: input, forget, cell, output;
    weights w_ih (D, 4H), w_hh (H, 4H), one bias (4H,), all U(+-1/sqrt(H)).

    bidirectional: a second set (w_ih_reverse, w_hh_reverse, bias_reverse) runs over the
    reversed sequence; outputs are (..., 2H), both directions' at each step concatenated
    (forward first), and the states ((h, c) forward, (h, c) reverse), the reverse direction's
    taken after it reads the first step.
    """

    def __init__(self, rt, input_size, hidden_size, batch_first=False, bidirectional=False,
                 rng=None, dtype=numpy.float32):
        super().__init__()
        check_sizes("LSTM", input_size=input_size, hidden_size=hidden_size)
        rt, rng = runtime_of(rt), generator(rng)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.batch_first, self.bidirectional = batch_first, bool(bidirectional)
        draw = uniform(rng, 1.0 / math.sqrt(hidden_size))
        for suffix in ("", "_reverse") if self.bidirectional else ("",):
            setattr(self, "w_ih" + suffix,
                    make_parameter(rt, (input_size, 4 * hidden_size), dtype, draw))
            setattr(self, "w_hh" + suffix,
                    make_parameter(rt, (hidden_size, 4 * hidden_size), dtype, draw))
            setattr(self, "bias" + suffix, make_parameter(rt, (4 * hidden_size,), dtype, draw))

    def forward(self, x, state=None):
        """x as above; state (h, c), each (N, H), zeros when None; bidirectional: one (h, c)
        per direction, ((h, c), (h, c))."""
        if x.ndim != 3 or x.shape[2] != self.input_size:
            layout = "(N, T, D)" if self.batch_first else "(T, N, D)"
            raise ValueError(f"LSTM: x must be {layout} with D = {self.input_size}, "
                             f"got {x.shape}")
        axis = 1 if self.batch_first else 0
        if state is None:
            batch = x.shape[1 - axis]
            zeros = as_tensor(x.runtime, numpy.zeros((batch, self.hidden_size), dtype=x.dtype))
            state = ((zeros, zeros), (zeros, zeros)) if self.bidirectional else (zeros, zeros)
        steps = range(x.shape[axis])
        if not self.bidirectional:
            outputs, last = self._run(x, state, steps, self.w_ih, self.w_hh, self.bias)
            return ops.stack(outputs, axis=axis), last
        forward, last = self._run(x, state[0], steps, self.w_ih, self.w_hh, self.bias)
        reverse, last_reverse = self._run(x, state[1], reversed(steps), self.w_ih_reverse,
                                          self.w_hh_reverse, self.bias_reverse)
        outputs = ops.concatenate([ops.stack(forward, axis=axis),
                                   ops.stack(reverse[::-1], axis=axis)], axis=-1)
        return outputs, (last, last_reverse)

    def _run(self, x, state, steps, w_ih, w_hh, bias):
        """The h of each step in `steps` (in that order) and the last (h, c)."""
        h, c = state
        outputs = []
        for t in steps:
            step = ops.getitem(x, (slice(None), t) if self.batch_first else (t,))
            h, c = ops.lstm_cell(step, h, c, w_ih, w_hh, bias)
            outputs.append(h)
        return outputs, (h, c)

    def extra_repr(self):
        return (f"{self.input_size}, {self.hidden_size}, batch_first={self.batch_first}, "
                f"bidirectional={self.bidirectional}")
