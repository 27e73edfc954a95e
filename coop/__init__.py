"""coop: train NumPy-style models under a hard memory budget."""
from coop import models, nn, ops, optim
from coop._core import CHEAP, EXPENSIVE, LOWEST, NO_STORAGE, POLICIES, Arena
from coop.autograd import is_grad_enabled, no_grad
from coop.backends.host import numpy_allocator
from coop.backends.sim import SimBackend
from coop.budget import parse_budget
from coop.errors import OutOfMemoryError
from coop.kernel import DEVICES, DeviceSpec, Kernel, kernel
from coop.runtime import POLICY_TABLE, Runtime, apply, get_runtime
from coop.tensor import Tensor

__all__ = ["Arena", "CHEAP", "DEVICES", "DeviceSpec", "EXPENSIVE", "Kernel", "NO_STORAGE",
           "LOWEST", "OutOfMemoryError", "POLICIES", "POLICY_TABLE", "Runtime", "SimBackend", "Tensor",
           "apply", "get_runtime", "is_grad_enabled", "kernel", "models", "nn", "no_grad",
           "numpy_allocator", "ops", "optim", "parse_budget"]
__version__ = "0.1.0"


def __getattr__(name):
    # The CuPy backend is optional: import it (and CuPy) only when asked for.
    if name in ("allocator", "CoopMemoryPool"):
        try:
            from coop.backends import cupy as cupy_backend
        except ModuleNotFoundError as err:
            if err.name != "cupy":
                raise
            raise ModuleNotFoundError(f"coop.{name} needs CuPy: pip install cupy-cuda12x",
                                      name="cupy") from err
        return getattr(cupy_backend, name)
    raise AttributeError(f"module 'coop' has no attribute {name!r}")
