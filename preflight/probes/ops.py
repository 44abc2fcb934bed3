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

Each collective is one row of `OPS` (nccl-tests' testColl style): how its size maps to bytes
(chunked or not), its bus-bandwidth factor, the torch.distributed names it goes by, how its
buffers start (init), how it runs and how its result is checked (verify). The functions below
look the op up once and never switch on its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from msgspec import Struct

_PATTERN_MOD = 200  # small integers: exact in bf16 (<= 256) and fp32


class Buffers(Struct):
    """The tensors of one op on one rank."""

    op: str
    send: torch.Tensor
    recv: torch.Tensor
    chunk: int
    nbytes: int


def _pattern(offset: int, count: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Element j is (j + offset) % _PATTERN_MOD + 1: one period built and tiled, not a modulo over every
    element (buffers are made per step and per check: at 4 MiB the modulo was most of a step's set-up)."""
    period = ((torch.arange(_PATTERN_MOD, dtype=torch.int64) + offset) % _PATTERN_MOD + 1).to(dtype)
    return period.to(device).repeat(-(-count // _PATTERN_MOD))[:count]


def _owned_ones(me: int, n: int, start: int, count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Element j is 1 where (start + j + me) % n == 0 (its owner is group rank me), else 0: one period, tiled."""
    period = torch.zeros(n, dtype=dtype)
    period[(-(start + me)) % n] = 1
    return period.to(device).repeat(-(-count // n))[:count]


def _zeros(count: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.zeros(count, dtype=dtype, device=device)


# -- init: (send, recv) for group rank `me` of `n`, `chunk` elements per chunk ----------------
Init = Callable[[int, int, int, torch.dtype, str], tuple[torch.Tensor, torch.Tensor]]


def _init_all_reduce(me: int, n: int, chunk: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    send = _owned_ones(me, n, 0, chunk, dtype, device)
    return send, send


def _init_reduce_scatter(me: int, n: int, chunk: int, dtype: torch.dtype, device: str
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    return _owned_ones(me, n, 0, chunk * n, dtype, device), _zeros(chunk, dtype, device)


def _init_all_gather(me: int, n: int, chunk: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _pattern(me, chunk, dtype, device), _zeros(chunk * n, dtype, device)


def _init_all_to_all(me: int, n: int, chunk: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    send = torch.cat([_pattern(7 * me + 3 * k, chunk, dtype, device) for k in range(n)])
    return send, _zeros(chunk * n, dtype, device)


def _init_broadcast(me: int, n: int, chunk: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    send = _pattern(0, chunk, dtype, device) if me == 0 else _zeros(chunk, dtype, device)
    return send, send


def _init_send_recv(me: int, n: int, chunk: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _pattern(me, chunk, dtype, device), _zeros(chunk, dtype, device)


# -- run: start the op asynchronously; its works ------------------------------------------------
Fns = tuple[Callable[..., Any], ...]  # the torch.distributed function(s) of an op (resolve)
Run = Callable[[Fns, Buffers, Any, list[int], int], list[Any]]


def _run_all_reduce(fns: Fns, b: Buffers, group: Any, ranks: list[int], me: int) -> list[Any]:
    return [fns[0](b.send, group=group, async_op=True)]


def _run_into(fns: Fns, b: Buffers, group: Any, ranks: list[int], me: int) -> list[Any]:
    return [fns[0](b.recv, b.send, group=group, async_op=True)]  # reduce_scatter, all_gather, all_to_all


def _run_broadcast(fns: Fns, b: Buffers, group: Any, ranks: list[int], me: int) -> list[Any]:
    return [fns[0](b.send, src=ranks[0], group=group, async_op=True)]


def _run_send_recv(fns: Fns, b: Buffers, group: Any, ranks: list[int], me: int) -> list[Any]:
    isend, irecv = fns  # adjacent pipeline stages: stage i sends to i+1, all pairs at once
    works = []
    if me + 1 < len(ranks):
        works.append(isend(b.send, dst=ranks[me + 1], group=group))
    if me > 0:
        works.append(irecv(b.recv, src=ranks[me - 1], group=group))
    return [w for w in works if w is not None]


# -- verify: (this rank's output is right, group ranks whose data arrived wrong) ----------------
Verify = Callable[[Buffers, int, int], tuple[bool, list[int]]]


VERIFY_SLICE = 1 << 20  # elements looked at at once: what a check of a wrong buffer allocates is bounded by it


def _verify_ones(b: Buffers, me: int, n: int) -> tuple[bool, list[int]]:
    """all_reduce / reduce_scatter: every element 1; a wrong element names its owner.

    A slice at a time, each owner's elements of it by a strided view: the extra device memory is one
    slice's mask, never an index of every wrong element (int64, 4x an fp32 buffer when all of it is
    wrong: an out-of-memory error on a GPU sized for the buffers, exactly when the data is corrupt)."""
    got = b.send if b.op == "all_reduce" else b.recv
    start = 0 if b.op == "all_reduce" else me * b.chunk
    owners: set[int] = set()
    for first in range(0, got.numel(), VERIFY_SLICE):
        wrong = got[first:first + VERIFY_SLICE] != 1
        if not bool(wrong.any()):
            continue
        # element j (of the whole buffer) is owned by (-(start + j)) % n: owner o's are j = first + p with
        # p = (-o - start - first) % n (mod n)
        owners.update(o for o in range(n) if o not in owners and bool(wrong[(-o - start - first) % n::n].any()))
        if len(owners) == n:
            break
    return not owners, sorted(owners)


def _verify_send_recv(b: Buffers, me: int, n: int) -> tuple[bool, list[int]]:
    if me == 0:
        return True, []
    ok = bool(torch.equal(b.recv, _pattern(me - 1, b.chunk, b.send.dtype, b.send.device)))
    return ok, [] if ok else [me - 1]


def _verify_broadcast(b: Buffers, me: int, n: int) -> tuple[bool, list[int]]:
    ok = bool(torch.equal(b.send, _pattern(0, b.chunk, b.send.dtype, b.send.device)))
    return ok, [] if ok else [0]


def _verify_chunks(b: Buffers, me: int, n: int) -> tuple[bool, list[int]]:
    """all_gather / all_to_all: chunk `src` of the output is src's pattern."""
    dtype, device = b.send.dtype, b.send.device
    sources = []
    for src in range(n):
        expected = _pattern(src if b.op == "all_gather" else 7 * src + 3 * me, b.chunk, dtype, device)
        if not torch.equal(b.recv[src * b.chunk:(src + 1) * b.chunk], expected):
            sources.append(src)
    return not sources, sources


class Op(Struct, frozen=True):
    """One collective, one row: bytes (chunked: `size` is the whole buffer, n chunks of it), the
    bus factor for n > 1 ranks, torch's names for it (newest first), init, run, verify."""

    name: str
    chunked: bool
    bus: Callable[[int], float]
    torch_names: tuple[str, ...]
    init: Init
    run: Run
    verify: Verify


# torch 2.4/2.5 have only the older names of the single-tensor all_gather / reduce_scatter.
OPS: dict[str, Op] = {op.name: op for op in (
    Op("all_reduce", False, lambda n: 2.0 * (n - 1) / n, ("all_reduce",), _init_all_reduce, _run_all_reduce,
       _verify_ones),
    Op("all_gather", True, lambda n: (n - 1) / n, ("all_gather_single", "all_gather_into_tensor"), _init_all_gather,
       _run_into, _verify_chunks),
    Op("reduce_scatter", True, lambda n: (n - 1) / n, ("reduce_scatter_single", "reduce_scatter_tensor"),
       _init_reduce_scatter, _run_into, _verify_ones),
    Op("all_to_all", True, lambda n: (n - 1) / n, ("all_to_all_single",), _init_all_to_all, _run_into, _verify_chunks),
    Op("broadcast", False, lambda n: 1.0, ("broadcast",), _init_broadcast, _run_broadcast, _verify_broadcast),
    Op("send_recv", False, lambda n: 1.0, ("isend", "irecv"), _init_send_recv, _run_send_recv, _verify_send_recv),
)}
NAMES = tuple(OPS)
COMPAT_NAMES: dict[str, tuple[str, ...]] = {name: op.torch_names for name, op in OPS.items()}


def known(op: str) -> bool:
    """Whether `op` is one of the collectives (a name a peer sent may be anything)."""
    return op in OPS


def row(op: str) -> Op:
    """The op's row; ValueError for a name that is none."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    return OPS[op]


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus factor of op on a group of n ranks; 0 for a group of one.

    A one-rank group moves nothing over any link (NCCL turns broadcast and send/recv into a
    local copy or nothing), so its bus bandwidth is 0 for every op rather than the copy speed:
    on an H100 a one-rank 256 MiB broadcast otherwise reads as 6,690 GB/s.
    """
    entry = row(op)
    return 0.0 if n <= 1 else entry.bus(n)


def algbw_gbps(nbytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 B/s)."""
    return nbytes / time_s / 1e9 if time_s > 0 else 0.0


def busbw_gbps(op: str, n: int, nbytes: int, time_s: float) -> float:
    """Bus bandwidth in GB/s: algbw times the op's bus factor."""
    return algbw_gbps(nbytes, time_s) * bus_factor(op, n)


def element_counts(op: str, size_bytes: int, n: int, elem: int) -> tuple[int, int]:
    """(elements per chunk, bytes measured) for a requested size; chunked ops round down to n chunks."""
    if row(op).chunked:
        chunk = max(1, size_bytes // (elem * n))
        return chunk, chunk * n * elem
    count = max(1, size_bytes // elem)
    return count, count * elem


# Elements an op's buffers hold (send and receive; one tensor where the op works in place), by chunk and
# group size: what make_buffers allocates, for sizing a step before allocating it (probes/memory_fit.py).
HELD_ELEMENTS: dict[str, Callable[[int, int], int]] = {
    "all_reduce": lambda chunk, n: chunk, "broadcast": lambda chunk, n: chunk,
    "reduce_scatter": lambda chunk, n: chunk * n + chunk, "all_gather": lambda chunk, n: chunk + chunk * n,
    "all_to_all": lambda chunk, n: 2 * chunk * n, "send_recv": lambda chunk, n: 2 * chunk,
}


def held_bytes(op: str, size_bytes: int, n: int, dtype: torch.dtype) -> int:
    """Device bytes make_buffers would allocate for this step (send and receive buffers)."""
    elem = torch.tensor([], dtype=dtype).element_size()
    chunk, _ = element_counts(op, size_bytes, n, elem)
    return HELD_ELEMENTS[op](chunk, n) * elem


def make_buffers(op: str, size_bytes: int, me: int, n: int, dtype: torch.dtype, device: str) -> Buffers:
    """Fresh, verifiable buffers for group rank `me` of `n`."""
    elem = torch.tensor([], dtype=dtype).element_size()
    chunk, nbytes = element_counts(op, size_bytes, n, elem)
    send, recv = row(op).init(me, n, chunk, dtype, device)
    return Buffers(op, send, recv, chunk, nbytes)


_resolved: dict[str, tuple[Callable[..., Any], ...]] = {}


class OpUnavailable(Exception):
    """This torch.distributed has none of the names an op is known by."""


def resolve(op: str) -> tuple[Callable[..., Any], ...]:
    """The torch.distributed function(s) for op: the first of its row's names this torch has.

    Looked up once, at the op's first launch (after any sitecustomize has run, so a planted
    wrapper is what gets called, as training code would call it); send_recv is (isend, irecv).
    """
    if op not in _resolved:
        names = row(op).torch_names
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
    return row(buffers.op).run(resolve(buffers.op), buffers, group, ranks, me)


def verify(buffers: Buffers, me: int, n: int) -> tuple[bool, list[int]]:
    """(this rank's output is right, group ranks whose data arrived wrong) after one fresh call."""
    return row(buffers.op).verify(buffers, me, n)
