"""The kernel's CPU lists (`0-3,8,10-11`), read and written in one place."""

from __future__ import annotations

MAX_CPUS = 65536  # a cpulist wider than this is not a machine's


def parse_cpulist(text: str) -> list[int]:
    """The kernel's cpulist (`0-3,8,10-11`) as CPUs; ValueError when it is not one."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if not 0 <= first <= last < MAX_CPUS:
            raise ValueError(f"not a cpulist: {text[:40]!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def cpulist(cpus: list[int]) -> str:
    """CPUs as the kernel writes them: [0, 1, 2, 3, 8] -> `0-3,8`."""
    parts: list[str] = []
    for cpu in sorted(cpus):
        if parts and cpu == int(parts[-1].rpartition("-")[2]) + 1:
            parts[-1] = f"{parts[-1].partition('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return ",".join(parts)
