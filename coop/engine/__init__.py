"""The residency engine: the one implementation of the rules that decide what is resident.

This layer owns the records of storages and ops and their lifetime, residency (pins, iterative
rematerialization, demotion), recomputable in-place, making room and the retry of a failed
first run, the logical clock and counters (``_engine``, in Cython), the executor contract that
live runs and replays implement (``Executor``; ``SizeExecutor``, the one of sizes only), the
runtime policies (``policies``) and the cost models (``cost``: ``DeviceSpec``, ``DEVICES``).

It may import only what lies below it: ``coop._core`` (the arena), ``coop.errors`` and
``coop.budget``; never the runtime, kernels, tensors, traces or backends above it.
"""
from coop.engine._engine import DEFAULT_COPY_COST, Engine, Executor, SizeExecutor

__all__ = ["DEFAULT_COPY_COST", "Engine", "Executor", "SizeExecutor"]
