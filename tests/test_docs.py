"""The docs stand alone: every relative Markdown link in README.md and docs/*.md resolves to a
file of the repository (and, with an anchor, to a heading of it), no file points to the
DESIGN.md that the repository never had (the design is docs/design.md), and the `coop`
command's help names no Markdown file that does not exist."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import coop

ROOT = Path(__file__).resolve().parent.parent
#: where the missing design document must not be cited
SCANNED = ("README.md", "coop", "docs", "examples", "benchmarks")
#: text files scanned (generated C++ and compiled files are not)
TEXT_SUFFIXES = {".py", ".pyx", ".pxd", ".pxi", ".md", ".txt", ".toml", ".cfg", ".ini", ".sh"}
#: the old name, as cited ("DESIGN.md", "DESIGN's")
OLD_DESIGN = re.compile(r"\bDESIGN\b(?:\.md)?")

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _markdown_files():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [f for f in files if f.is_file()]


def _prose(text):
    """text's lines, those of fenced code blocks blanked (their brackets and #s are code)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def _slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(path):
    seen, anchors = {}, set()
    for line in _prose(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(path):
    for lineno, line in enumerate(_prose(path.read_text(encoding="utf-8")), 1):
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):   # not in inline code
            yield lineno, m.group(1)


def test_there_are_markdown_files_and_links():
    files = _markdown_files()
    assert ROOT / "README.md" in files and ROOT / "docs" / "design.md" in files
    assert sum(1 for f in files for _ in _links(f)) >= 10


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for lineno, target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        where = f"{doc.relative_to(ROOT)}:{lineno}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{where} (outside the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{where} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def _citing_files():
    found = {}
    for entry in SCANNED:
        base = ROOT / entry
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for f in files:
            if f.suffix not in TEXT_SUFFIXES or not f.is_file() or "__pycache__" in f.parts:
                continue
            lines = [n for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
                     if OLD_DESIGN.search(line)]
            if lines:
                found[f.relative_to(ROOT).as_posix()] = lines
    return found


def test_nothing_cites_the_missing_design_document():
    found = _citing_files()
    assert not found, f"cite docs/design.md instead (file: lines): {found}"


#: subcommand -> the module whose docstring is its help text
HELP_SOURCES = {"": "coop/cli/main.py", "replay": "coop/cli/replay.py", "bench": "coop/cli/bench.py"}


@pytest.mark.parametrize("command", list(HELP_SOURCES), ids=lambda c: c or "coop")
def test_cli_help_names_only_existing_files(command, tmp_path):
    # the coop imported here (installed, or built in place), not the checkout's sources that
    # `python -m` would find first in the working directory
    env = dict(os.environ, PYTHONPATH=str(Path(coop.__file__).parent.parent))
    argv = [sys.executable, "-m", "coop", *([command] if command else []), "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True,
                         cwd=tmp_path).stdout
    # a document the user is sent to: a path (docs/x.md) or a capitalised name (README.md);
    # not the output files `coop bench` writes (tables.md)
    named = {n for n in re.findall(r"[\w./-]*\w\.md\b", out) if "/" in n or n[:-3].isupper()}
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"`coop {command} --help` names {missing}"


# ---- the documentation site ------------------------------------------------------------------

def _mkdocs(config, site, env=None):
    """`mkdocs build --strict` of config into site: the finished process (not with -q: a quiet
    build counts no warnings, so it never fails strictly)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(config), "-d", str(site)], capture_output=True, text=True,
                          env=env, cwd=site.parent, timeout=300)


def test_the_documentation_site_builds_strictly(tmp_path):
    """docs/ and its API reference (from the docstrings of the coop imported here, the compiled
    core included) build with warnings as errors: no broken link or anchor, no public name
    without a docstring."""
    pytest.importorskip("mkdocstrings")
    parent = str(Path(coop.__file__).parent.parent)
    env = dict(os.environ, PYTHONPATH=parent, COOP_DOCS_PATH=parent)
    done = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site", env)
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("coop.Runtime", "coop.Arena", "coop.budget.Budget", "coop.optim.clip_grad_norm",
                 "coop.nn.Linear"):
        assert f'id="{name}"' in api, name
    assert "allocate_or_evict" in api        # a method of the compiled arena, by inspection


def test_a_broken_link_fails_the_strict_build(tmp_path):
    pytest.importorskip("mkdocs")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\ndocs_dir: docs\n")
    done = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr


def test_the_docstring_hook_names_each_undocumented_public_name(monkeypatch):
    import importlib.util
    import types
    spec = importlib.util.spec_from_file_location("docstrings", ROOT / "docs/hooks/docstrings.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    module = types.ModuleType("fake")

    class Base:
        def run(self):
            """Documented here, inherited below."""

    class Child(Base):
        """A class."""

        def run(self):
            pass

        def bare(self):
            pass

    def undocumented():
        pass

    # inspect.getdoc finds an overridden method's class by module and qualified name
    monkeypatch.setitem(sys.modules, "fake", module)
    for value in (Base, Child, undocumented, Base.run, Child.run, Child.bare):
        value.__module__ = "fake"
        value.__qualname__ = value.__qualname__.rsplit("<locals>.", 1)[-1]
    for value in (Base, Child, undocumented):
        setattr(module, value.__name__, value)
    assert sorted(hook._undocumented(module)) == ["fake.Base", "fake.Child.bare",
                                                  "fake.undocumented"]


def test_the_readmes_runtime_example_prints_what_the_readme_says(tmp_path):
    """The README's "The runtime and kernels" block, run as written (modelled costs, so its
    figures repeat), prints the line the text after it quotes."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### The runtime and kernels", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    quoted = re.search(r"It prints `([^`]*)`", section).group(1)
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == quoted
