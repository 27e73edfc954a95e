"""coop: train NumPy-style models under a hard memory budget.

``import coop`` loads the core API only (the arena, the runtime, the host and simulation
backends). The training packages ``coop.nn``, ``coop.ops``, ``coop.optim`` and ``coop.models``
load on first use (``coop.nn.Linear``, ``from coop import nn``, ``import coop.models``), as
does the optional CuPy backend (``coop.allocator``, ``coop.CoopMemoryPool``).
"""
import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys

try:
    from coop._core import CHEAP, EXPENSIVE, LOWEST, NO_STORAGE, Arena
except ModuleNotFoundError as _error:
    if _error.name != "coop._core":
        raise
    # imported from a source tree whose Cython modules are not built (a clone's root is first
    # on sys.path for `python -m coop`): say what to do in one line, not a traceback
    _ADVICE = (f"coop: {__path__[0]} is coop's source tree, not a built coop (its Cython "
               "modules are not compiled there): use the installed `coop` command, run Python "
               "outside the source folder, or build in place with `pip install -e .`")
    if _sys.argv[:1] == ["-m"]:
        print(_ADVICE, file=_sys.stderr)
        raise SystemExit(2) from None
    raise ImportError(_ADVICE, name="coop") from None
from coop.autograd.methods import install as _install_tensor_methods
from coop.autograd.tape import is_grad_enabled, no_grad
from coop.backends.host import numpy_allocator
from coop.backends.sim import SimBackend
from coop.budget import parse_budget
from coop.errors import CoopError, HostMemoryError, OutOfMemoryError, Thrash, TraceError
from coop.engine.cost import DEVICES, DeviceSpec
from coop.kernel import Kernel, apply, get_runtime, kernel
from coop.engine.policies import POLICIES
from coop.runtime import Runtime
from coop.tensor import Tensor

_install_tensor_methods(Tensor)

#: subpackages loaded on first attribute access (PEP 562): importing them costs more than the
#: core API they build on
_LAZY_SUBMODULES = frozenset({"distributed", "models", "nn", "ops", "optim", "timeline"})
#: names served by the optional CuPy backend (importing it imports CuPy)
_CUPY_NAMES = frozenset({"allocator", "CoopMemoryPool"})

__all__ = ["Arena", "CHEAP", "CoopError", "DEVICES", "DeviceSpec", "EXPENSIVE", "HostMemoryError",
           "Kernel", "NO_STORAGE", "LOWEST", "OutOfMemoryError", "POLICIES", "Runtime", "SimBackend", "Tensor",
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
