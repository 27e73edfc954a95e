"""The layers point down (pyproject.toml's import-linter contract): the Python modules checked by
`lint-imports`, the Cython modules by reading their imports from their sources, against the
same list of layers."""
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import coop

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(coop.__file__).resolve().parent
#: Cython modules outside every layer's package, and the layer each belongs to
CYTHON_LAYER = {"coop._core": "coop._core", "coop._executor": "coop.runtime",
                "coop._random": "coop.random"}
IMPORT = re.compile(r"^\s*(?:from\s+(coop(?:\.\w+)*)\s+c?import\b|c?import\s+(coop(?:\.\w+)*))",
                    re.M)


def _layers():
    """The contract's layers, top first, each a list of module names; coop._core is placed
    just above coop.budget (Cython: import-linter does not see it)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract, = config["tool"]["importlinter"]["contracts"]
    layers = [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]
    layers.insert(layers.index(["coop.budget"]), ["coop._core"])
    return layers


def _layer_of(module, layers):
    """Index of the layer holding module (by package prefix), or None."""
    module = CYTHON_LAYER.get(module, module)
    for i, layer in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return i
    return None


def test_the_python_modules_keep_the_contract():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or \
        shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports (import-linter) is not installed: pip install '.[test]'")
    out = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], capture_output=True,
                         text=True, cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "1 kept, 0 broken" in out.stdout


def _upward(module, source, layers):
    """The imports in source (a Cython module's text) of modules in layers above module's."""
    own = _layer_of(module, layers)
    assert own is not None, f"{module} is in no layer of pyproject.toml's contract"
    package = module.rsplit(".", 1)[0]
    wrong = []
    for match in IMPORT.finditer(source):
        target = match.group(1) or match.group(2)
        if target == "coop" or (package != "coop" and target.startswith(package + ".")):
            continue    # the package itself, or a sibling in the same package
        layer = _layer_of(target, layers)
        if layer is not None and layer < own:
            wrong.append(f"{module} imports {target} (a layer above it)")
    return wrong


def test_the_cython_modules_import_only_downward():
    layers = _layers()
    sources = sorted(PACKAGE.rglob("*.pyx"))
    assert len(sources) >= 7, "Cython sources missing beside the package"
    wrong = []
    for path in sources:
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        wrong += _upward(module, path.read_text(), layers)
    assert not wrong, "\n".join(wrong)


def test_the_cython_check_sees_an_upward_import():
    layers = _layers()
    assert _upward("coop._core", "from coop.errors import OutOfMemoryError\n", layers) == []
    assert _upward("coop.backends._host", "from coop._core cimport Arena\n", layers) == []
    assert _upward("coop.backends._host", "    from coop.runtime import Runtime\n", layers) == [
        "coop.backends._host imports coop.runtime (a layer above it)"]
    assert _upward("coop._core", "cimport coop.trace._replay\n", layers) == [
        "coop._core imports coop.trace._replay (a layer above it)"]
    assert _layer_of("coop._executor", layers) == _layer_of("coop.runtime", layers)
    assert _layer_of("numpy", layers) is None
