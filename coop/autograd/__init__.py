"""Reverse-mode autograd on coop Tensors, in three modules at three layers:

- ``tape``: grad mode and the graph's nodes, below the ops, which record them;
- ``backward``: the backward pass, above the ops (gradients are summed with them);
- ``methods``: Tensor's operators and op methods (``x + y``, ``x.sum()``, ``loss.backward()``),
  installed on coop.Tensor from above the ops.

This package's own module imports only the tape.
"""
from coop.autograd.tape import Node, is_grad_enabled, no_grad, record

__all__ = ["Node", "is_grad_enabled", "no_grad", "record"]
