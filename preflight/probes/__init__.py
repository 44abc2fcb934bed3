"""Step 7: collective probes on every DeviceMesh dimension.

`run_probes` is called on every rank once rank 0 gave the go. It returns, on rank 0, the
measured results and the findings about them; other ranks return an empty outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from preflight.model import Finding, ProbeResult, World
from preflight.options import RunOptions


@dataclass
class ProbeOutcome:
    """Results and findings of the probes (filled on rank 0 only)."""

    results: list[ProbeResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def run_probes(world: World, options: RunOptions, store: Any) -> ProbeOutcome:
    """Measure the collectives. Not built yet: no probe runs, so nothing is claimed."""
    return ProbeOutcome()
