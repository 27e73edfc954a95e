"""Traces: a run's program as JSON lines (docs/trace-format.md), and what reads them.

- ``writer``: TraceWriter, which the runtime calls to record a run;
- ``records``: reading and checking coop traces (every error a TraceError naming the line);
- ``dtr``: importing DTR simulator logs;
- ``compile``: records to a Program (``load`` reads and compiles a file of either format);
- ``_replay`` (Cython): the Program and the Replayer, which turns each record into the engine
  call the runtime makes; ``replay``: replays under a budget and policy, peaks, metrics;
- ``timeline``: a run's or a replay's memory over time as one HTML page.

Layer: above the engine (coop.engine, coop._core) and below the runtime, which records traces
through ``TraceWriter``; it never imports the runtime, the training packages or the CLI.
"""
import importlib as _importlib

#: public name -> the module that defines it, loaded on first access (PEP 562): the runtime
#: imports coop.trace._replay at `import coop`, and this keeps the readers out of that import
_NAMES = {"compile_program": "compile", "load": "compile", "import_dtr": "dtr",
          "MAX_ALIGNMENT": "records", "MAX_BYTES": "records", "check_record": "records",
          "read_records": "records", "sniff": "records", "valid_alignment": "records",
          "TraceWriter": "writer"}
__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module 'coop.trace' has no attribute {name!r}")
    return getattr(_importlib.import_module(f"coop.trace.{_NAMES[name]}"), name)


def __dir__():
    return __all__
