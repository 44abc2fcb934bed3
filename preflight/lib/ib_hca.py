"""NCCL_IB_HCA, parsed by NCCL's rules in one place: which RDMA device ports NCCL may use.

`mlx5_0:1,mlx5_1` lists devices (and optionally a port); a leading `^` excludes the listed ones
instead; a leading `=` matches device names exactly, else a name is a prefix (mlx5 matches mlx5_0).
"""

from __future__ import annotations

from msgspec import Struct


class HcaFilter(Struct, frozen=True):
    """A parsed NCCL_IB_HCA."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, str], ...]  # (device, port or "")

    @classmethod
    def parse(cls, spec: str | None) -> HcaFilter | None:
        """The filter NCCL_IB_HCA sets, or None when it is unset or empty (every port is a candidate)."""
        text = (spec or "").strip()
        if not text:
            return None
        exclude = text.startswith("^")
        text = text.lstrip("^")
        exact = text.startswith("=")
        text = text.lstrip("=")
        entries = tuple(item.partition(":")[::2] for item in (x.strip() for x in text.split(",")) if item)
        return cls(exclude, exact, entries)

    def allows(self, device: str, port: int) -> bool:
        """Whether NCCL may use this device's port under the filter."""
        listed = any((device == name if self.exact else device.startswith(name)) and (not want or str(port) == want)
                     for name, want in self.entries)
        return listed != self.exclude
