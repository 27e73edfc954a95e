"""Backends: the memory behind an arena, and the hooks that route an array library's
allocations into it.

- ``base``: the Backend class, which declares every method the runtime and the executors call;
- ``host`` (+ ``_host``, Cython): NumPy's data allocations in a host arena (a NEP 49 handler);
- ``cupy`` (+ ``_cupy_pool``, Cython, and ``streams``): a ``cupy.cuda.MemoryPool`` serving
  CuPy's allocations from one device reservation (importing it imports CuPy);
- ``sim``: no memory at all, sizes and costs only (replays and paper-scale models).

Layer: memory only, no policy or runtime state; imports the core (coop._core), coop.budget and
coop.errors, never the engine, the runtime or anything above.
"""
