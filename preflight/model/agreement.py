"""Which preflight wrote a payload, and the options every rank must agree on, as they travel to rank 0.

The stamp (preflight's version and the payload's layout, WIRE_VERSION) is read even from a
payload that does not otherwise decode (channel/wire.read_stamp), so a rank started from another
preflight is named as such, not as an unreadable payload. The agreeing options travel as text by
flag (`{"--sizes": "64K", ...}`: options/agreement.py makes them) in the payload's shared part.
"""

from __future__ import annotations

from msgspec import Struct

# The payload's layout (channel/wire.py: `_Own`, `_Shared`); raised whenever either changes in a way
# an older rank 0 could not read, so that rank 0 names the rank instead of failing to decode it.
WIRE_VERSION = 4  # 2: the host's port counters, NUMA CPUs and build fingerprint in the shared document;
# 3: the confirming passes' calls per figure (RemeasureSteps, ConfirmPairs): every rank must time as many;
# 4: the check durations as bytes (4-byte little-endian numbers), the RDMA ports a shared section of their own
PREFLIGHT_VERSION = "preflight version"  # the names the comparison gives the stamp's two parts
WIRE = "wire version"


class RankStamp(Struct, frozen=True):
    """The preflight that wrote a payload: its version and the payload layout it speaks."""

    preflight: str = ""
    wire: int = 0

    def as_values(self) -> dict[str, str]:
        """The stamp as two compared values, beside the options."""
        return {PREFLIGHT_VERSION: self.preflight or "unknown", WIRE: str(self.wire) if self.wire else "unknown"}
