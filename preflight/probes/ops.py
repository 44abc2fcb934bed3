"""The collectives: bytes and bus factors per nccl-tests, verifiable inputs, launching, checking.

Byte counts follow nccl-tests (the `size` column): all_reduce and broadcast and send/recv move
one buffer of `size`; all_gather's size is its whole output, reduce_scatter's its whole input,
all_to_all's the whole buffer each rank sends. algbw = bytes / time (GB = 1e9 B); busbw =
algbw x bus factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
all_to_all, 1 for broadcast and send/recv.

Inputs depend on the group rank, so every result has one known value, and a wrong value
says whose data it was: in all_reduce and reduce_scatter element j is 1 on exactly one rank
(its owner, (-j) mod n) and 0 elsewhere, so the sum is all ones and a wrong element names
its owner; in the data-moving ops a chunk's position names its source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_PATTERN_MOD = 200  # small integers: exact in bf16 (<= 256) and fp32
NAMES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


def known(op: str) -> bool:
    """Whether `op` is one of the collectives (a name a peer sent may be anything)."""
    return op in NAMES


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus factor of op on a group of n ranks; 0 for a group of one.

    A one-rank group moves nothing over any link (NCCL turns broadcast and send/recv into a
    local copy or nothing), so its bus bandwidth is 0 for every op rather than the copy speed:
    on an H100 a one-rank 256 MiB broadcast otherwise reads as 6,690 GB/s.
    """
    if n <= 1:
        if not known(op):
            raise ValueError(f"unknown op {op!r}")
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "send_recv"):
        return 1.0
    raise ValueError(f"unknown op {op!r}")


def algbw_gbps(nbytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s)."""
    return nbytes / time_s / 1e9 if time_s > 0 else 0.0


def busbw_gbps(op: str, n: int, nbytes: int, time_s: float) -> float:
    """Bus bandwidth in GB/s: algbw times the op's bus factor."""
    return algbw_gbps(nbytes, time_s) * bus_factor(op, n)


def element_counts(op: str, size_bytes: int, n: int, elem: int) -> tuple[int, int]:
    """(elements per chunk, bytes measured) for a requested size; chunked ops round down to n chunks."""
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        chunk = max(1, size_bytes // (elem * n))
        return chunk, chunk * n * elem
    count = max(1, size_bytes // elem)
    return count, count * elem


@dataclass
class Buffers:
    """The tensors of one op on one rank."""

    op: str
    send: torch.Tensor
    recv: torch.Tensor
    chunk: int
    nbytes: int


def _pattern(offset: int, count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    values = (torch.arange(count, dtype=torch.int64, device=device) + offset) % _PATTERN_MOD + 1
    return values.to(dtype)


def _owned_ones(me: int, n: int, start: int, count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    index = torch.arange(start, start + count, dtype=torch.int64, device=device)
    return ((index + me) % n == 0).to(dtype)


def make_buffers(op: str, size_bytes: int, me: int, n: int, dtype: torch.dtype, device: str) -> Buffers:
    """Fresh, verifiable buffers for group rank `me` of `n`."""
    elem = torch.tensor([], dtype=dtype).element_size()
    chunk, nbytes = element_counts(op, size_bytes, n, elem)
    if op == "all_reduce":
        send = _owned_ones(me, n, 0, chunk, dtype, device)
        return Buffers(op, send, send, chunk, nbytes)
    if op == "reduce_scatter":
        send = _owned_ones(me, n, 0, chunk * n, dtype, device)
        return Buffers(op, send, torch.zeros(chunk, dtype=dtype, device=device), chunk, nbytes)
    if op == "all_gather":
        send = _pattern(me, chunk, dtype, device)
        return Buffers(op, send, torch.zeros(chunk * n, dtype=dtype, device=device), chunk, nbytes)
    if op == "all_to_all":
        send = torch.cat([_pattern(7 * me + 3 * k, chunk, dtype, device) for k in range(n)])
        return Buffers(op, send, torch.zeros(chunk * n, dtype=dtype, device=device), chunk, nbytes)
    if op == "broadcast":
        send = _pattern(0, chunk, dtype, device) if me == 0 else torch.zeros(chunk, dtype=dtype, device=device)
        return Buffers(op, send, send, chunk, nbytes)
    if op == "send_recv":
        return Buffers(op, _pattern(me, chunk, dtype, device), torch.zeros(chunk, dtype=dtype, device=device),
                       chunk, nbytes)
    raise ValueError(f"unknown op {op!r}")


# torch.distributed names per op, newest first: torch 2.4/2.5 have only the older names of
# the single-tensor all_gather / reduce_scatter. Resolved once per process (see resolve()).
COMPAT_NAMES: dict[str, tuple[str, ...]] = {
    "all_reduce": ("all_reduce",),
    "all_gather": ("all_gather_single", "all_gather_into_tensor"),
    "reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
    "all_to_all": ("all_to_all_single",),
    "broadcast": ("broadcast",),
    "send_recv": ("isend", "irecv"),
}
_resolved: dict[str, tuple[Callable[..., Any], ...]] = {}


class OpUnavailable(Exception):
    """This torch.distributed has none of the names an op is known by."""


def resolve(op: str) -> tuple[Callable[..., Any], ...]:
    """The torch.distributed function(s) for op: the first name of COMPAT_NAMES this torch has.

    Looked up once, at the op's first launch (after any sitecustomize has run, so a planted
    wrapper is what gets called, as training code would call it); send_recv is (isend, irecv).
    """
    if op not in _resolved:
        names = COMPAT_NAMES.get(op)
        if names is None:
            raise ValueError(f"unknown op {op!r}")
        if op == "send_recv":
            _resolved[op] = (dist.isend, dist.irecv)
        else:
            found = next((getattr(dist, n) for n in names if hasattr(dist, n)), None)
            if found is None:
                raise OpUnavailable(f"{op}: torch.distributed {torch.__version__} has none of {', '.join(names)}")
            _resolved[op] = (found,)
    return _resolved[op]


def launch(buffers: Buffers, group: Any, ranks: list[int], me: int) -> list[Any]:
    """Start the op asynchronously on `group` (global `ranks`, this rank at index `me`); its works."""
    op, send, recv = buffers.op, buffers.send, buffers.recv
    fns = resolve(op)
    if op == "all_reduce":
        return [fns[0](send, group=group, async_op=True)]
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return [fns[0](recv, send, group=group, async_op=True)]
    if op == "broadcast":
        return [fns[0](send, src=ranks[0], group=group, async_op=True)]
    if op == "send_recv":  # adjacent pipeline stages: stage i sends to i+1, all pairs at once
        isend, irecv = fns
        works = []
        if me + 1 < len(ranks):
            works.append(isend(send, dst=ranks[me + 1], group=group))
        if me > 0:
            works.append(irecv(recv, src=ranks[me - 1], group=group))
        return [w for w in works if w is not None]
    raise ValueError(f"unknown op {op!r}")


def verify(buffers: Buffers, me: int, n: int) -> tuple[bool, list[int]]:
    """(this rank's output is right, group ranks whose data arrived wrong) after one fresh call."""
    op, chunk = buffers.op, buffers.chunk
    dtype, device = buffers.send.dtype, buffers.send.device.type
    if op in ("all_reduce", "reduce_scatter"):
        got = buffers.send if op == "all_reduce" else buffers.recv
        start = 0 if op == "all_reduce" else me * chunk
        wrong = (got != 1).nonzero().flatten()
        owners = sorted({int((-(start + int(j))) % n) for j in wrong[:4096].tolist()})
        return not len(wrong), owners
    if op == "send_recv":
        if me == 0:
            return True, []
        ok = bool(torch.equal(buffers.recv, _pattern(me - 1, chunk, dtype, device)))
        return ok, [] if ok else [me - 1]
    if op == "broadcast":
        ok = bool(torch.equal(buffers.send, _pattern(0, chunk, dtype, device)))
        return ok, [] if ok else [0]
    sources = []
    for src in range(n):
        expected = _pattern(src if op == "all_gather" else 7 * src + 3 * me, chunk, dtype, device)
        if not torch.equal(buffers.recv[src * chunk:(src + 1) * chunk], expected):
            sources.append(src)
    return not sources, sources
