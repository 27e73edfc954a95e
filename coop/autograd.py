"""Reverse-mode autograd on coop Tensors: the graph's nodes, grad mode and the backward pass.

Every forward and backward computation is a kernel run through ``coop.apply`` (the ops in
``coop.ops``), so saved activations and gradients are storages the policy may evict and
recompute. A Node holds *detached* handles on what it saved and points at its inputs' nodes
(or at leaf Tensors, whose ``.grad`` it accumulates): Tensor -> Node -> inputs' Nodes, never
back, so reference counting frees a graph once nothing needs it (no cycles, as in the tape).

This module imports nothing of the runtime at import time: ``coop.tensor`` builds Tensor on
``TensorMethods``, whose operators call ``coop.ops`` lazily.
"""
import contextlib
import contextvars
import itertools
import numbers

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


def backward(root, grad=None, retain_graph=False):
    """Accumulate d(root)/d(leaf) into every reachable leaf's ``.grad``.

    Nodes run in reverse creation order (a topological order found without recursion); each
    node's gradient is the sum (add_n) of what its consumers sent. Unless retain_graph, each
    node is released right after its backward, so saved tensors die as the pass proceeds, and
    the root (if resident) becomes a constant where it is: its value stays, the records that
    computed it die.
    """
    ops = _ops()
    if not root.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad: create leaves "
                           "with runtime.tensor(data, requires_grad=True)")
    with no_grad():
        if grad is None:
            if root.size != 1:
                raise RuntimeError(f"backward() without a gradient needs a one-element tensor, "
                                   f"got shape {root.shape}; pass grad=")
            grad = ops.ones_like(root)
        elif grad.shape != root.shape:
            raise ValueError(f"gradient of shape {grad.shape} for a tensor of shape {root.shape}")
        if root.grad_fn is None:
            _accumulate(root, grad)
            return
        pending = {root.grad_fn: grad}
        handed = set()   # ids of storages given to leaves in this pass: each gets its own
        del grad
        for node in _reverse_topological(root.grad_fn):
            g = pending.pop(node, None)
            if g is not None:
                grads = node.backward(node, g)
                del g
                for edge, shape, gi in zip(node.edges, node.shapes, grads):
                    if edge is None or gi is None:
                        continue
                    if gi.shape != shape:
                        gi = ops.sum_to(gi, shape)
                    if isinstance(edge, Node):
                        pending[edge] = gi if edge not in pending else ops.add_n(pending[edge], gi)
                    else:
                        _accumulate(edge, gi, handed)
                        # kept as a constant from now on, as PyTorch's .grad is a plain leaf:
                        # the records behind it can die, so in-place updates of the
                        # parameters copy nothing
                        edge.grad.runtime.materialize(edge.grad)
                grads = gi = None   # the pass holds no gradient longer than it must
            if not retain_graph:
                node.release()
        if not retain_graph:
            # the root keeps its value (where it is, if resident) but not the records behind
            # it, as the gradients do: holding on to the loss then keeps no graph alive
            root.runtime.materialize(root, settle=False)


def _accumulate(leaf, grad, handed=None):
    """leaf.grad += grad; a first gradient is stored as is, unless another leaf holds its
    storage (``add(x, y)`` sends one gradient to both): then as a copy."""
    if leaf.grad is not None:
        leaf.grad = _ops().add_n(leaf.grad, grad)
        return
    if handed is not None:
        # storage ids, not storages: the set must not keep a record alive
        if grad.storage.sid in handed:
            grad = _ops().copy(grad)
        handed.add(grad.storage.sid)
    leaf.grad = grad.detach()


def _reverse_topological(root):
    """Nodes reachable from root, consumers before producers (iterative: no recursion)."""
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        if node.edges is None:
            raise RuntimeError(f"backward through {node!r} a second time: the graph's saved "
                               "tensors were released; pass retain_graph=True to the first "
                               "backward()")
        for edge in node.edges:
            if isinstance(edge, Node) and edge not in seen:
                seen.add(edge)
                stack.append(edge)
    return sorted(seen, key=lambda n: n.seq, reverse=True)


def _ops():
    from coop import (
        ops,  # imported late: coop.ops imports coop.tensor, which imports us
    )
    return ops


def _scalar(value):
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


class TensorMethods:
    """Autograd entry points, Python operators and op methods of coop.Tensor (see coop.ops)."""

    __slots__ = ()
    __array_ufunc__ = None   # `ndarray * tensor` defers to Tensor.__rmul__ (which refuses)

    def backward(self, grad=None, retain_graph=False):
        """Accumulate gradients into the leaves' ``.grad`` (see coop.autograd.backward)."""
        backward(self, grad, retain_graph)

    def detach(self):
        """A new handle on the same storage, outside the graph (requires_grad False)."""
        return type(self)(self._view)

    def __add__(self, other):
        return _ops().add(self, other)

    def __radd__(self, other):
        return _ops().add(other, self)

    def __sub__(self, other):
        return _ops().sub(self, other)

    def __rsub__(self, other):
        return _ops().sub(other, self)

    def __mul__(self, other):
        return _ops().mul(self, other)

    def __rmul__(self, other):
        return _ops().mul(other, self)

    def __truediv__(self, other):
        return _ops().div(self, other)

    def __rtruediv__(self, other):
        return _ops().div(other, self)

    def __pow__(self, other):
        return _ops().pow(self, other)

    def __rpow__(self, other):
        return _ops().pow(other, self)

    def __matmul__(self, other):
        return _ops().matmul(self, other)

    def __rmatmul__(self, other):
        return _ops().matmul(other, self)

    def __neg__(self):
        return _ops().neg(self)

    def __getitem__(self, index):
        return _ops().getitem(self, index)

    @property
    def T(self):
        return _ops().transpose(self)

    def transpose(self, *axes):
        return _ops().transpose(self, axes[0] if len(axes) == 1 and not _scalar(axes[0])
                                else axes or None)

    def reshape(self, *shape):
        return _ops().reshape(self, shape[0] if len(shape) == 1 and not _scalar(shape[0])
                              else shape)

    def broadcast_to(self, shape):
        return _ops().broadcast_to(self, shape)

    def sum(self, axis=None, keepdims=False):
        return _ops().sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops().mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops().max(self, axis, keepdims)

    def var(self, axis=None, keepdims=False):
        return _ops().var(self, axis, keepdims)

    def exp(self):
        return _ops().exp(self)

    def log(self):
        return _ops().log(self)

    def sqrt(self):
        return _ops().sqrt(self)

    def tanh(self):
        return _ops().tanh(self)

    def sigmoid(self):
        return _ops().sigmoid(self)

    def relu(self):
        return _ops().relu(self)
