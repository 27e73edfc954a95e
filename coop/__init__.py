"""coop: train NumPy-style models under a hard memory budget.

``import coop`` loads the core API only (the arena, the runtime, the host and simulation
backends). The training packages ``coop.nn``, ``coop.ops``, ``coop.optim`` and ``coop.models``
load on first use (``coop.nn.Linear``, ``from coop import nn``, ``import coop.models``), as
does the optional CuPy backend (``coop.allocator``, ``coop.CoopMemoryPool``).
"""
import importlib as _importlib
import importlib.util as _importlib_util

from coop._core import CHEAP, EXPENSIVE, LOWEST, NO_STORAGE, POLICIES, Arena
from coop.autograd import is_grad_enabled, no_grad
from coop.backends.host import numpy_allocator
from coop.backends.sim import SimBackend
from coop.budget import parse_budget
from coop.errors import CoopError, OutOfMemoryError, Thrash, TraceError
from coop.engine.cost import DEVICES, DeviceSpec
from coop.kernel import Kernel, kernel
from coop.runtime import POLICY_TABLE, Runtime, apply, get_runtime
from coop.tensor import Tensor

#: subpackages loaded on first attribute access (PEP 562): importing them costs more than the
#: core API they build on
_LAZY_SUBMODULES = frozenset({"distributed", "models", "nn", "ops", "optim", "timeline"})
#: names served by the optional CuPy backend (importing it imports CuPy)
_CUPY_NAMES = frozenset({"allocator", "CoopMemoryPool"})

__all__ = ["Arena", "CHEAP", "CoopError", "DEVICES", "DeviceSpec", "EXPENSIVE", "Kernel", "NO_STORAGE",
           "LOWEST", "OutOfMemoryError", "POLICIES", "POLICY_TABLE", "Runtime", "SimBackend", "Tensor",
           "apply", "get_runtime", "is_grad_enabled", "kernel", "models", "nn", "no_grad",
           "numpy_allocator", "ops", "optim", "parse_budget", "Thrash", "TraceError"]
__version__ = "0.1.0"


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        # importing a submodule also binds it as an attribute of this package, so this runs
        # once per name (and never for a submodule someone imported already)
        return _importlib.import_module(f"coop.{name}")
    # The CuPy backend is optional: import it (and CuPy) only when asked for.
    if name in _CUPY_NAMES:
        try:
            from coop.backends import cupy as cupy_backend
        except ModuleNotFoundError as err:
            if err.name != "cupy":
                raise
            raise ModuleNotFoundError(f"coop.{name} needs CuPy: pip install cupy-cuda12x",
                                      name="cupy") from err
        return getattr(cupy_backend, name)
    raise AttributeError(f"module 'coop' has no attribute {name!r}")


def __dir__():
    # what is loaded already, plus what __getattr__ would serve: the lazy subpackages, and the
    # CuPy names when CuPy is installed (find_spec looks for it without importing it)
    names = set(globals()) | _LAZY_SUBMODULES
    if _importlib_util.find_spec("cupy") is not None:
        names |= _CUPY_NAMES
    return sorted(names)
