"""Extensions and compiler directives only; metadata lives in pyproject.toml.

COOP_DEBUG=1 builds with bounds/wraparound checks on (and without -O3).
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
compile_args = ["-O0", "-g"] if DEBUG else ["-O3"]
extensions = [
    Extension(
        "coop._core",
        ["coop/_core.pyx"],
        language="c++",
        extra_compile_args=compile_args + ["-std=c++17"],
    ),
    Extension(
        "coop._engine",
        ["coop/_engine.pyx"],
        language="c++",
        extra_compile_args=compile_args + ["-std=c++17"],
    ),
    Extension(
        "coop._executor",
        ["coop/_executor.pyx"],
        language="c++",
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args + ["-std=c++17"],
    ),
    Extension(
        "coop._replay",
        ["coop/_replay.pyx"],
        language="c++",
        extra_compile_args=compile_args + ["-std=c++17"],
    ),
    Extension(
        "coop._host",
        ["coop/_host.pyx"],
        language="c++",
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=compile_args + ["-std=c++17"],
    ),
]
setup(ext_modules=cythonize(extensions, compiler_directives=directives))
