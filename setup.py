"""Extensions and compiler directives only; metadata lives in pyproject.toml.

COOP_DEBUG=1 builds with bounds/wraparound checks on, C++ container indices checked too
(libstdc++'s _GLIBCXX_ASSERTIONS: Cython's bounds checks do not cover libcpp.vector), and
without -O3.
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("COOP_DEBUG", "") not in ("", "0")
directives = {
    "language_level": 3,
    "embedsignature": True,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
}
compile_args = ["-O0", "-g", "-D_GLIBCXX_ASSERTIONS"] if DEBUG else ["-O3"]


def extension(name, uses_numpy=False):
    """The module coop.<name> (dotted: "engine._engine") from its .pyx, in C++17; uses_numpy:
    it cimports NumPy's C API."""
    numpy_args = dict(include_dirs=[numpy.get_include()],
                      define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    path = name.replace(".", "/")
    return Extension(f"coop.{name}", [f"coop/{path}.pyx"], language="c++",
                     extra_compile_args=compile_args + ["-std=c++17"],
                     **(numpy_args if uses_numpy else {}))


extensions = [
    extension("_core"),
    extension("engine._engine"),
    extension("_executor"),
    extension("_replay"),
    extension("_host", uses_numpy=True),
    extension("_cupy_pool"),
    extension("_random"),
]
setup(ext_modules=cythonize(extensions, compiler_directives=directives))
