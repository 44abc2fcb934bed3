"""Collective steps skipped alike on every rank, and why (probes/memory_fit.py, probes/mig.py decide;
checks/probe_memory.py reports): plain data, so the checks read it without importing the probes."""

from __future__ import annotations

from msgspec import Struct


class Skipped(Struct, frozen=True):
    """A step no rank runs, and why."""

    index: int
    dim: str
    op: str
    size: int
    reason: str


class MigRank(Struct, frozen=True):
    """A rank whose probes' GPU is a MIG instance."""

    rank: int
    host: str
    instance: str  # the instance's UUID, MIG-...
