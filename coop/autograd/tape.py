"""The autograd tape: grad mode and the graph's nodes, recorded by the ops (coop.ops).

A Node holds *detached* handles on what it saved and points at its inputs' nodes (or at leaf
Tensors, whose ``.grad`` it accumulates): Tensor -> Node -> inputs' Nodes, never back, so
reference counting frees a graph once nothing needs it (no cycles, as in the runtime's tape).

Layer: below the ops (which call ``record``); it imports nothing of coop.
"""
import contextlib
import contextvars
import itertools

_grad_enabled = contextvars.ContextVar("coop_grad_enabled", default=True)
_sequence = itertools.count()


def is_grad_enabled():
    """Whether ops record nodes for backward (per thread and context)."""
    return _grad_enabled.get()


@contextlib.contextmanager
def no_grad():
    """Run ops without recording a graph (their outputs do not require grad)."""
    token = _grad_enabled.set(False)
    try:
        yield
    finally:
        _grad_enabled.reset(token)


class Node:
    """One differentiable op of the graph: its backward rule, what it saved, where grads go.

    ``backward(node, grad)`` returns one gradient (a Tensor or None) per input; a gradient may
    have the broadcast shape, the engine sums it down to the input's shape. ``edges[i]`` is the
    i-th input's Node, the input itself when it is a leaf that requires grad, or None.
    """

    __slots__ = ("name", "backward", "edges", "needs", "shapes", "saved", "attrs", "seq")

    def __init__(self, name, backward, inputs, saved, attrs):
        self.name = name
        self.backward = backward
        self.edges = tuple(t.grad_fn if t.grad_fn is not None else t if t.requires_grad else None
                           for t in inputs)
        self.needs = tuple(e is not None for e in self.edges)   # which inputs want a gradient
        self.shapes = tuple(t.shape for t in inputs)
        self.saved = tuple(t.detach() for t in saved)            # handles with no grad_fn
        self.attrs = attrs
        self.seq = next(_sequence)   # creation order: reverse order is a topological order

    def release(self):
        """Drop what backward needed (saved tensors' memory is freed) and the edges."""
        self.saved = self.edges = None

    def __repr__(self):
        state = "released" if self.edges is None else f"{len(self.saved)} saved"
        return f"<coop.autograd.Node {self.name} {state}>"


def record(out, inputs, backward, saved=(), name=None, **attrs):
    """Make ``out`` differentiable when grad mode is on and an input requires grad.

    ``saved``: the tensors backward reads (inputs or out itself); ``attrs`` reach backward as
    ``node.attrs``. Returns out.
    """
    if not _grad_enabled.get() or not any(t.requires_grad for t in inputs):
        return out
    out.grad_fn = Node(name or getattr(backward, "__name__", "op"), backward, inputs, saved, attrs)
    out.requires_grad = True
    return out


