"""The repository's scripts (examples/, benchmarks/) loaded as modules for the tests: they are
files of the checkout, not part of the installed package."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
BENCHMARKS = os.path.join(ROOT, "benchmarks")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_example(name):
    """examples/NAME.py as a module."""
    return _load(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))


def load_benchmark(name):
    """benchmarks/NAME.py as a module."""
    return _load(name, os.path.join(BENCHMARKS, f"{name}.py"))
