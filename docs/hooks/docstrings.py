"""mkdocs hook: every public name that the API reference documents has a docstring.

For each ``::: module`` block of the site's pages, the module's public names (its ``__all__``,
else the names it defines without a leading underscore) and the public methods of its classes
are checked; each one without a docstring (its own or the one it overrides) is a warning, which ``mkdocs build --strict`` turns
into a failed build.
"""
import importlib
import inspect
import logging
import re

log = logging.getLogger("mkdocs.hooks.docstrings")
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", re.MULTILINE)


def _public(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
    return [(n, getattr(module, n)) for n in names]


def _undocumented(module):
    """Dotted names of module's public classes, functions and methods without a docstring (a
    method that overrides a documented one inherits its docstring, as inspect.getdoc says)."""
    for name, value in _public(module):
        if inspect.ismodule(value) or not callable(value):
            continue
        if not (inspect.getdoc(value) or "").strip():
            yield f"{module.__name__}.{name}"
        if not inspect.isclass(value):
            continue
        for attr, member in vars(value).items():
            if attr.startswith("_") or not (callable(member) or isinstance(
                    member, (property, classmethod, staticmethod))):
                continue
            if not (inspect.getdoc(getattr(value, attr)) or "").strip():
                yield f"{module.__name__}.{name}.{attr}"


def on_page_markdown(markdown, page, **kwargs):
    """Warn for each undocumented public name of the modules this page documents."""
    for path in DIRECTIVE.findall(markdown):
        module = importlib.import_module(path)
        for missing in _undocumented(module):
            log.warning(f"{page.file.src_path}: {missing} has no docstring")
    return markdown
