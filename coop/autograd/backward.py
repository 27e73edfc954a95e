"""The backward pass: gradients of a root through the tape's nodes (coop.autograd.tape).

Every backward computation is a kernel run through ``coop.apply`` (the ops in ``coop.ops``),
so gradients are storages the policy may evict and recompute.

Layer: above the ops (it sums gradients with them); below coop.nn and coop.optim.
"""
from coop import ops
from coop.autograd.tape import Node, no_grad
from coop.tensor import Tensor


def backward(root, grad=None, retain_graph=False, on_grad=None):
    """Accumulate d(root)/d(leaf) into every reachable leaf's ``.grad``.

    Nodes run in reverse creation order (a topological order found without recursion); each
    node's gradient is the sum (add_n) of what its consumers sent. Unless retain_graph, each
    node is released right after its backward, so saved tensors die as the pass proceeds, and
    the root (if resident) becomes a constant where it is: its value stays, the records that
    computed it die.

    on_grad, when given, is called once per reachable leaf as soon as its gradient is complete
    (every node with an edge to it has run), with the leaf, while the pass goes on: what
    ``coop.optim.Optimizer.backward_step`` updates a parameter in. A leaf that no gradient
    reached (its ``.grad`` is None) is not passed.
    """
    if not root.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad: create leaves "
                           "with runtime.tensor(data, requires_grad=True)")
    with no_grad():
        if grad is None:
            if root.size != 1:
                raise RuntimeError(f"backward() without a gradient needs a one-element tensor, "
                                   f"got shape {root.shape}; pass grad=")
            grad = ops.ones_like(root)
        else:
            if not isinstance(grad, Tensor):
                # an array (or a number): a constant of root's runtime, as a kernel's result
                grad = root.runtime.tensor(root.runtime.xp.asarray(grad, dtype=root.dtype)
                                           if root.runtime.xp is not None else grad)
            elif grad.runtime is not root.runtime:
                raise ValueError("backward(): the gradient belongs to another coop.Runtime than "
                                 "the tensor; make it with the tensor's runtime")
            if grad.shape != root.shape:
                raise ValueError(f"gradient of shape {grad.shape} for a tensor of shape "
                                 f"{root.shape}")
        if root.grad_fn is None:
            _accumulate(root, grad)
            if on_grad is not None:
                on_grad(root)
            return
        pending = {root.grad_fn: grad}
        handed = set()   # ids of storages given to leaves in this pass: each gets its own
        del grad
        nodes = _reverse_topological(root.grad_fn)
        waiting = None
        if on_grad is not None:
            waiting = _leaf_edges(nodes)
            if not retain_graph:
                # now, not at the end: a leaf changed by on_grad (an update in place) would
                # otherwise be copied to keep the root recomputable
                root.runtime.materialize(root, settle=False)
        for node in nodes:
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
            if waiting is not None:
                done = _complete(node, waiting)
                if done:
                    # the gradients on their way become constants where they are (a leaf's
                    # .grad is one too): recomputing one could need a leaf's old value, which
                    # on_grad may change in place, so that value would be copied and kept
                    for gp in pending.values():
                        gp.runtime.materialize(gp, settle=False)
                    for leaf in done:
                        sid = leaf.grad.storage.sid
                        on_grad(leaf)
                        if leaf.grad is None:
                            # dropped: its storage id may name a new storage from now on
                            handed.discard(sid)
            if not retain_graph:
                node.release()
        if not retain_graph and on_grad is None:
            # the root keeps its value (where it is, if resident) but not the records behind
            # it, as the gradients do: holding on to the loss then keeps no graph alive
            root.runtime.materialize(root, settle=False)


def _leaves(node):
    """The leaves node's edges point at (once per edge)."""
    return (e for e in node.edges if e is not None and not isinstance(e, Node))


def _leaf_edges(nodes):
    """Per leaf (by id): [edges from nodes to it, the leaf (held, so that its id stays its own
    for the pass)]."""
    waiting = {}
    for node in nodes:
        for leaf in _leaves(node):
            waiting.setdefault(id(leaf), [0, leaf])[0] += 1
    return waiting


def _complete(node, waiting):
    """node has run (or had no gradient to send): the leaves it was the last edge to, that
    hold a gradient."""
    done = []
    for leaf in _leaves(node):
        entry = waiting[id(leaf)]
        entry[0] -= 1
        if entry[0] == 0:
            del waiting[id(leaf)]
            if leaf.grad is not None:
                done.append(leaf)
    return done


def _accumulate(leaf, grad, handed=None):
    """leaf.grad += grad; a first gradient is stored as is, unless another leaf holds its
    storage (``add(x, y)`` sends one gradient to both): then as a copy."""
    if leaf.grad is not None:
        leaf.grad = ops.add_n(leaf.grad, grad)
        return
    if handed is not None:
        # storage ids, not storages: the set must not keep a record alive
        if grad.storage.sid in handed:
            grad = ops.copy(grad)
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
