"""`import coop` stays light: the core API only. coop.nn, coop.ops, coop.optim and coop.models
load on first attribute access (PEP 562), and the trace, bench and plotting code when used.

Each check runs in a fresh interpreter (this process has imported everything already).
Import times are measured by benchmarks/bench_import.py, never asserted here.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import coop

#: coop modules `import coop` may load: the core API (arena, runtime, kernels, the autograd
#: tape and Tensor's methods, host and simulation backends, budgets, errors) and what the
#: runtime is built on (the engine: its Cython half, policies and cost models; the array
#: executor; the backends' base class)
CORE_MODULES = frozenset({
    "coop", "coop._core", "coop.backends._host", "coop.arrays", "coop.autograd",
    "coop.autograd.tape", "coop.autograd.methods", "coop.backends",
    "coop.backends.host", "coop.backends.sim", "coop.budget", "coop.errors", "coop.kernel",
    "coop.runtime", "coop.tensor", "coop.engine", "coop.engine._engine", "coop.engine.policies",
    "coop.engine.cost", "coop._executor", "coop.backends.base", "coop._checks",
})
#: `import coop` loads fewer coop modules than this (22 of CORE_MODULES today); it loaded 41
#: when all nine models, nn, ops and optim came with it
MAX_COOP_MODULES = 23
#: packages `import coop` must not load (nor anything under them)
DEFERRED = ("coop.nn", "coop.ops", "coop.optim", "coop.models", "coop.cli", "coop.trace.compile",
            "coop.trace.records", "coop.trace.dtr", "coop.trace.writer", "coop.trace.replay",
            "coop.trace.timeline", "coop.backends.cupy", "coop.__main__", "matplotlib", "tqdm",
            "cupy", "scipy", "sklearn")


def _python(code, *args, check=True):
    """Run code (or, with args, `python args...`) in a fresh interpreter that imports the coop
    this test imported (installed, or built in place), not the bare source tree."""
    env = dict(os.environ, PYTHONPATH=str(Path(coop.__file__).parent.parent))
    argv = [sys.executable, *args] if code is None else [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, env=env,
                         cwd=Path(coop.__file__).parent.parent)
    if check and out.returncode:
        raise AssertionError(f"{argv[1:]} exited with {out.returncode}:\n{out.stderr}")
    return out


def _loaded_after(code):
    """The sorted module names loaded after running code in a fresh interpreter."""
    out = _python(code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _under(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_import_coop_loads_the_core_only():
    loaded = _loaded_after("import coop")
    ours = [m for m in loaded if _under(m, ("coop",))]
    assert not [m for m in loaded if _under(m, DEFERRED)]
    assert set(ours) <= CORE_MODULES, sorted(set(ours) - CORE_MODULES)
    assert len(ours) < MAX_COOP_MODULES, ours


def test_the_core_api_needs_nothing_deferred():
    # build and run a small program on each in-process backend without touching a subpackage
    loaded = _loaded_after(
        "import numpy as np, coop\n"
        "rt = coop.Runtime(coop.numpy_allocator('1MiB'), policy='coop', cost='cpu')\n"
        "w = rt.tensor(np.ones((8, 8)))\n"
        "y = rt.apply(coop.Kernel(lambda a, b: a @ b, name='matmul'), w, w)\n"
        "assert float(y.numpy().sum()) == 512.0\n"
        "sim = coop.Runtime(coop.SimBackend('1MiB'))\n"
        "assert coop.parse_budget('1KiB') == 1024 and 'coop' in coop.POLICIES\n"
        "assert coop.POLICIES and coop.DEVICES and coop.Arena(512).capacity == 512\n")
    assert not [m for m in loaded if _under(m, DEFERRED)]


def test_subpackages_load_on_first_access():
    out = _python(
        "import sys, coop\n"
        "assert 'coop.nn' not in sys.modules\n"
        "layer = coop.nn.Linear\n"               # attribute access loads coop.nn (and coop.ops)
        "assert layer.__module__ == 'coop.nn.layers' and 'coop.nn' in sys.modules\n"
        "assert 'coop.models' not in sys.modules and 'coop.optim' not in sys.modules\n"
        "from coop import optim\n"               # from-import goes through __getattr__ too
        "assert optim is coop.optim and optim.AdamW\n"
        "import coop.models\n"                   # a plain submodule import still works
        "assert coop.models.GPT.__name__ == 'GPT' and coop.ops.matmul\n"
        "print('ok')\n")
    assert out.stdout == "ok\n"


def test_all_and_dir_are_honest():
    out = _python(
        "import sys, coop\n"
        "names = dir(coop)\n"
        "for n in ('nn', 'ops', 'optim', 'models', 'Runtime', 'POLICIES'):\n"
        "    assert n in names, n\n"
        "assert 'coop.nn' not in sys.modules\n"  # dir() lists them without loading them
        "missing = [n for n in coop.__all__ if not hasattr(coop, n)]\n"
        "assert not missing, missing\n"
        "assert set(coop.__all__) <= set(dir(coop))\n"
        "try:\n"
        "    coop.no_such_name\n"
        "except AttributeError as err:\n"
        "    assert 'no_such_name' in str(err)\n"
        "else:\n"
        "    raise AssertionError('coop.no_such_name resolved')\n"
        "ns = {}\n"
        "exec('from coop import *', ns)\n"
        "assert ns['nn'] is coop.nn and ns['Runtime'] is coop.Runtime\n"
        "print('ok')\n")
    assert out.stdout == "ok\n"


def test_dir_lists_the_cupy_names_only_when_cupy_can_be_imported():
    out = _python("import sys; sys.modules['cupy'] = None\nimport coop\n"
                  "print('allocator' in dir(coop), 'coop.backends.cupy' in sys.modules)")
    assert out.stdout == "False False\n"


def test_the_coop_command_still_works():
    out = _python(None, "-m", "coop", "--help")
    assert out.stdout.startswith("usage: coop") and "replay" in out.stdout
    for sub in ("replay", "bench"):
        out = _python(None, "-m", "coop", sub, "--help")
        assert out.stdout.startswith(f"usage: coop {sub}")


def test_the_console_script_still_works():
    # the `coop` script installed next to this interpreter (pyproject: coop.cli.main:main)
    script = shutil.which("coop", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("no `coop` console script next to this interpreter (not pip-installed)")
    env = dict(os.environ, PYTHONPATH=str(Path(coop.__file__).parent.parent))
    out = subprocess.run([script, "--help"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.startswith("usage: coop")


def test_a_source_tree_that_is_not_built_says_what_to_do(tmp_path):
    # a clone's root before any build: `python -m coop` there imports the source folder coop/
    # (cwd is first on sys.path); -S leaves out site-packages, where an install would be
    shutil.copytree(Path(coop.__file__).parent, tmp_path / "coop",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "*.cpp", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-S", "-m", "coop", "--help"], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "source tree" in lines[0] and "pip install -e ." in lines[0]
    assert "the installed `coop` command" in lines[0]
    out = subprocess.run([sys.executable, "-S", "-c", "import coop"], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1].startswith("ImportError: coop: ")
    assert "pip install -e ." in out.stderr.splitlines()[-1]
