"""The cyclic garbage collector paused for a block, as it was after.

A trainer that imported torch holds a large heap; the allocations of preflight's own import
(preflight.check's first use) then trigger one full collection of that heap, which cost
0.45-0.7 s of a 4-rank gloo trainer's time to its first step on the 2-core VM (0.9-1.3 s of
the import's whole time; docs/performance.md). Paused, preflight's import allocates the same
and the trainer's collector runs when its own allocations say so. Reference counting still
frees everything that is not in a cycle.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block; the collector enabled after iff it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
