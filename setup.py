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
# -falign-loops=64: the hot loops (the window's two-pointer scan above all, branch-bound) start on
# a cache line, so their speed does not depend on where the rest of the module's code lands:
# unaligned, the evict-only window scan ran 10-20% slower or faster from one build to the next
# with the same instructions (docs/benchmarks.md, "The restructuring")
compile_args = ["-O0", "-g", "-D_GLIBCXX_ASSERTIONS"] if DEBUG else ["-O3", "-falign-loops=64"]


def extension(name, uses_numpy=False):
    """The module name (dotted, e.g. coop.trace._replay) from its .pyx, in C++17; uses_numpy:
    it cimports NumPy's C API."""
    numpy_args = dict(include_dirs=[numpy.get_include()],
                      define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    return Extension(name, [name.replace(".", "/") + ".pyx"], language="c++",
                     extra_compile_args=compile_args + ["-std=c++17"],
                     **(numpy_args if uses_numpy else {}))


extensions = [
    extension("coop._core"),
    extension("coop.engine._engine"),
    extension("coop._executor", uses_numpy=True),
    extension("coop.trace._replay"),
    extension("coop.backends._host", uses_numpy=True),
    extension("coop.backends._cupy_pool"),
    extension("coop._random"),
]
setup(ext_modules=cythonize(extensions, compiler_directives=directives))
