"""Tensor's autograd entry points, Python operators and op methods, installed on
coop.Tensor by ``install`` (coop/__init__.py calls it once).

The ops are above coop.tensor (they make Tensors), so Tensor cannot inherit its operators at
class creation without an import loop; this module sits above the ops and fills them in, and
loads coop.ops on the first operator used, so that ``import coop`` stays light.
"""
import numbers


def _ops():
    from coop import ops    # loaded on first use: `import coop` does not load the ops
    return ops


def _scalar(value):
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


class TensorMethods:
    """Autograd entry points, Python operators and op methods of coop.Tensor (see coop.ops)."""

    __slots__ = ()
    __array_ufunc__ = None   # `ndarray * tensor` defers to Tensor.__rmul__ (which refuses)

    def backward(self, grad=None, retain_graph=False):
        """Accumulate gradients into the leaves' ``.grad`` (see coop.autograd.backward)."""
        from coop.autograd.backward import backward     # loaded with the ops, on first use
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
        """The transpose (all axes reversed), as coop.ops.transpose."""
        return _ops().transpose(self)

    def transpose(self, *axes):
        """The axes permuted (reversed when none are given), as coop.ops.transpose."""
        return _ops().transpose(self, axes[0] if len(axes) == 1 and not _scalar(axes[0])
                                else axes or None)

    def reshape(self, *shape):
        """The same elements in another shape, as coop.ops.reshape."""
        return _ops().reshape(self, shape[0] if len(shape) == 1 and not _scalar(shape[0])
                              else shape)

    def broadcast_to(self, shape):
        """This tensor broadcast to shape, as coop.ops.broadcast_to."""
        return _ops().broadcast_to(self, shape)

    def sum(self, axis=None, keepdims=False):
        """The sum over axis (None: all), as coop.ops.sum."""
        return _ops().sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        """The mean over axis (None: all), as coop.ops.mean."""
        return _ops().mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        """The maximum over axis (None: all), as coop.ops.max."""
        return _ops().max(self, axis, keepdims)

    def var(self, axis=None, keepdims=False):
        """The variance over axis (None: all), as coop.ops.var."""
        return _ops().var(self, axis, keepdims)

    def exp(self):
        """Elementwise exp, as coop.ops.exp."""
        return _ops().exp(self)

    def log(self):
        """Elementwise log, as coop.ops.log."""
        return _ops().log(self)

    def sqrt(self):
        """Elementwise sqrt, as coop.ops.sqrt."""
        return _ops().sqrt(self)

    def tanh(self):
        """Elementwise tanh, as coop.ops.tanh."""
        return _ops().tanh(self)

    def sigmoid(self):
        """Elementwise sigmoid, as coop.ops.sigmoid."""
        return _ops().sigmoid(self)

    def relu(self):
        """Elementwise relu, as coop.ops.relu."""
        return _ops().relu(self)


def install(tensor_class):
    """Give tensor_class (coop.Tensor) every method of TensorMethods."""
    for name, value in vars(TensorMethods).items():
        if name not in ("__dict__", "__doc__", "__module__", "__slots__", "__weakref__",
                        "__qualname__"):
            setattr(tensor_class, name, value)
