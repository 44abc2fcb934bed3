"""The shared sections of rank payloads (channel/wire.py) and how rank 0 reads each once.

A payload's second document holds the sections the ranks of a host send alike (`SharedDocument`). In a
--out-dir file they are inline; through the store each is replaced by its digest (`store_form`)
and its bytes go under `shared/<digest>` once (issue 44). `SharedSections` is rank 0's memory of
them: every distinct section decoded once, whether it came inline (by its bytes) or by digest
(fetched once, checked against the digest), and the parts of a rank's own document that ranks
often send alike (health, placement), decoded once per recent distinct value.
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Struct, field

from preflight.model import CheckOutcome, GpuFacts, IbCounters, IbPort, NetworkFacts, Versions, World
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.host_parts import join_network
from preflight.model.placement_facts import BuildFacts
from preflight.model.string_sharing import share_strings


class SharedDocument(Struct):
    """The second document: the sections the ranks of a host send alike (most of them, the whole job)."""

    env: dict[str, str]
    world: World  # its rank's own fields blank (in `_OwnWorld`)
    versions: Versions
    network: NetworkFacts  # without its RDMA ports, which are `ib_ports`
    gpus: list[GpuFacts]
    outcomes: list[CheckOutcome]  # durations zeroed: they travel in `_Own.outcome_us`
    options: dict[str, str] = field(default_factory=dict)  # the agreeing options by flag (model/agreement.py)
    # The parts of a rank's health and placement its host's ranks read alike (on an 8-GPU node 2-3 kB of a
    # rank's ~5 kB, and the build fingerprint ~9 kB on local rank 0): the RDMA ports' error counters, the
    # NUMA nodes' CPUs, the host's build fingerprint (empty but on the rank that takes it).
    ib_counters: list[IbCounters] = field(default_factory=list)
    numa_cpus: dict[int, list[int]] = field(default_factory=dict)
    build: BuildFacts = field(default_factory=BuildFacts)
    # The host's RDMA ports, split off its network section (model/host_parts.py): the same on every host of
    # a healthy homogeneous job, so one section for the job where the network sections are one per host.
    ib_ports: list[IbPort] = field(default_factory=list)


DIGEST_CHARS = 32  # a section's digest: BLAKE2b-128, hex
_HEX_DIGEST = f"[0-9a-f]{{{DIGEST_CHARS}}}"  # the one rule of what a digest looks like (below, and `_digest_of`)
Digest = Annotated[str, msgspec.Meta(pattern=f"^{_HEX_DIGEST}$")]


class _SharedRaw(Struct):
    """`SharedDocument` as rank 0 first reads it: each section's bytes, decoded once per distinct value."""

    env: msgspec.Raw
    world: msgspec.Raw
    versions: msgspec.Raw
    network: msgspec.Raw
    gpus: msgspec.Raw
    outcomes: msgspec.Raw
    options: msgspec.Raw
    ib_counters: msgspec.Raw
    numa_cpus: msgspec.Raw
    build: msgspec.Raw
    ib_ports: msgspec.Raw


class _SharedRefs(Struct):
    """`SharedDocument` as a rank publishes it through the store: each section's digest (see `store_form`)."""

    env: Digest
    world: Digest
    versions: Digest
    network: Digest
    gpus: Digest
    outcomes: Digest
    options: Digest
    ib_counters: Digest
    numa_cpus: Digest
    build: Digest
    ib_ports: Digest


# The sections of `SharedDocument`, in its order, with their types.
_SECTIONS: dict[str, Any] = {"env": dict[str, str], "world": World, "versions": Versions, "network": NetworkFacts,
                             "gpus": list[GpuFacts], "outcomes": list[CheckOutcome],
                             "options": dict[str, str], "ib_counters": list[IbCounters],
                             "numa_cpus": dict[int, list[int]], "build": BuildFacts, "ib_ports": list[IbPort]}
_NETWORK, _IB_PORTS = list(_SECTIONS).index("network"), list(_SECTIONS).index("ib_ports")
T = TypeVar("T")
SEPARATOR = b"\n"  # compact JSON holds no raw newline (one in a string is written \\n)


def section_digest(name: str, data: bytes) -> str:
    """The digest a section travels by: of its name and its bytes (two sections of different
    names with the same bytes, `[]` as GPUs and as outcomes, are two digests)."""
    return hashlib.blake2b(data, digest_size=DIGEST_CHARS // 2, person=name.encode()).hexdigest()


def store_form(wire: bytes) -> tuple[bytes, dict[str, bytes]]:
    """`to_wire`'s bytes as they go through the store: the shared document's sections replaced by
    their digests, and the sections by digest (written under `shared/<digest>` where absent).

    Bytes that are not a payload in `to_wire`'s form go as they are, with no sections: rank 0
    reads them as it reads any payload, and refuses them there (RUN002)."""
    cut = wire.find(SEPARATOR)
    try:
        if cut < 0:
            raise BadPayload("no shared document")
        raw = decode(wire[cut + 1:], _SharedRaw, max_bytes=MAX_PAYLOAD_BYTES)
    except BadPayload:
        return wire, {}
    parts = [bytes(getattr(raw, name)) for name in _SECTIONS]
    digests = [section_digest(name, data) for name, data in zip(_SECTIONS, parts, strict=True)]
    return wire[:cut + 1] + encode(_SharedRefs(*digests)), dict(zip(digests, parts, strict=True))


class SharedSections:
    """Rank 0's decoded sections by their bytes: each distinct value decoded (and held) once."""

    def __init__(self) -> None:
        self.decoded: dict[tuple[str, bytes], Any] = {}
        # Each section's last bytes and value: the next rank most often sent the same (one
        # environment for the job, one network section per host). Comparing with it (a memcmp)
        # saves hashing the section again.
        self.last: dict[str, tuple[bytes, Any]] = {}
        # Whole shared documents lately seen, with their sections as decoded: a rank whose document
        # is one of these (its host's other ranks, most of the time) is not parsed at all.
        self.documents: dict[bytes, tuple[Any, ...]] = {}
        self.refs: dict[bytes, tuple[str, ...] | None] = {}  # a document's digests (`_refs`), lately read
        self.last_document: tuple[bytes, tuple[Any, ...]] | None = None

        # Sections that came by digest (through the store), decoded and checked against it; and
        # the digests whose bytes were refused (absent, not matching, not decoding), with why.
        self.by_digest: dict[str, Any] = {}
        self.own: dict[tuple[str, bytes], Any] = {}  # own_part's recent values
        self.strings: dict[str, str] = {}  # the strings of own_part's values, one object each (model/string_sharing.py)
        self.joins: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}  # joined's recent values
        self.refused: dict[str, str] = {}

    def missing(self, payloads: Iterable[bytes]) -> dict[str, str]:
        """The digests these payloads name that rank 0 has not learned yet, each with its section's
        name: what to fetch from the store (`shared/<digest>`) before reading them. A payload that
        does not read is skipped here; reading it says why."""
        wanted: dict[str, str] = {}
        last = b""
        for data in payloads:
            cut = data.find(SEPARATOR)
            if cut < 0 or len(data) > MAX_PAYLOAD_BYTES:
                continue
            if len(data) - cut - 1 == len(last) and data.endswith(last):
                continue  # the rank before's document (a host's other ranks), compared in place: no copy, no hash
            document = data[cut + 1:]
            if document in self.documents:
                continue  # already looked at
            last = document
            refs = self._refs(document)
            try:
                digests = refs if refs is not None else [
                    _digest_of(getattr(decode(document, _SharedRaw, max_bytes=MAX_PAYLOAD_BYTES), name))
                    for name in _SECTIONS]
            except BadPayload:
                continue
            wanted.update((digest, name) for digest, name in zip(digests, _SECTIONS)
                          if digest and digest not in self.by_digest and digest not in self.refused)
        return wanted

    def learn(self, wanted: dict[str, str], found: Sequence[bytes | None]) -> list[str]:
        """Take the sections fetched for `wanted` (None where absent): each checked against its
        digest and decoded once. The digests learned (rank 0 may empty their keys)."""
        learned = []
        for (digest, name), data in zip(wanted.items(), found, strict=True):
            if data is None:
                self.refused[digest] = f"its {name} section ({digest[:12]}) is not in the store"
            elif section_digest(name, data) != digest:
                self.refused[digest] = f"the store's {name} section under {digest[:12]} does not match its digest"
            else:
                try:  # a digest names its bytes: no second cache by bytes (16,384 hosts' sections)
                    self.by_digest[digest] = decode(data, _SECTIONS[name], max_bytes=MAX_PAYLOAD_BYTES)
                    learned.append(digest)
                except BadPayload as exc:
                    self.refused[digest] = f"its {name} section ({digest[:12]}): {str(exc)[:160]}"
        return learned

    def own_part(self, name: str, raw: msgspec.Raw, into: Any) -> Any:
        """A part of a rank's own document that ranks often send alike (health, placement): the
        object decoded for the same bytes lately, or a new one. Bounded: per-rank values (a
        clock offset each) keep at most _OWN_KEPT of them, never the job's."""
        data = bytes(raw)
        last = self.last.get(name)
        if last is not None and last[0] == data:
            return last[1]
        found = self.own.get((name, data))
        if found is None:
            if len(self.own) >= _OWN_KEPT:
                self.own.clear()
            if len(self.strings) >= _STRINGS_KEPT:  # bounded: per-rank strings (a MIG instance each) come and go
                self.strings.clear()
            found = decode(data, into, max_bytes=MAX_PAYLOAD_BYTES)
            found = self.own[(name, data)] = share_strings(found, self.strings)
        self.last[name] = (data, found)
        return found

    def joined(self, parts: tuple[Any, ...], join: Callable[..., T]) -> T:
        """join(*parts), the same object again for the same parts (a rank's own health and its host's
        counters: one object for the ranks that sent both alike, as own_part gives one for the same bytes).
        Bounded as own_part is; each entry holds its parts, so no id in a key is reused while it is kept."""
        key = tuple(map(id, parts))
        found = self.joins.get(key)
        if found is None or not all(map(operator.is_, found[0], parts)):  # the same objects, compared in C
            if len(self.joins) >= _OWN_KEPT:
                self.joins.clear()
            found = self.joins[key] = (parts, join(*parts))
        return found[1]

    def _section(self, name: str, raw: msgspec.Raw) -> Any:
        """A shared document's section: inline (a --out-dir file), or by a digest rank 0 has learned."""
        digest = _digest_of(raw)
        if not digest:
            return self.get(name, raw)
        return self._learned(name, digest)

    def _learned(self, name: str, digest: str) -> Any:
        """The section learned under `digest`; BadPayload, saying why, where it was not."""
        found = self.by_digest.get(digest, _ABSENT)
        if found is _ABSENT:
            raise BadPayload(self.refused.get(digest, f"its {name} section ({digest[:12]}) never reached rank 0"))
        return found

    def _refs(self, document: bytes) -> tuple[str, ...] | None:
        """The digests of a document that came by reference (the store's form: every section a digest), read
        once for `missing` and `sections` both; None for any other document (inline, or not all digests)."""
        found = self.refs.get(document, _ABSENT)
        if found is _ABSENT:
            try:
                refs = decode(document, _SharedRefs, max_bytes=MAX_PAYLOAD_BYTES)
                found = tuple(getattr(refs, name) for name in _SECTIONS)
            except BadPayload:
                found = None
            if len(self.refs) >= _DOCUMENTS_KEPT:  # bounded as `documents` is
                self.refs.clear()
            self.refs[document] = found
        return found

    def get(self, name: str, raw: msgspec.Raw | bytes) -> Any:
        data = bytes(raw)
        last = self.last.get(name)
        if last is not None and last[0] == data:
            return last[1]
        key = (name, data)
        found = self.decoded.get(key)
        if found is None:
            found = self.decoded[key] = decode(data, _SECTIONS[name])
        self.last[name] = (data, found)
        return found

    def sections(self, data: bytes, start: int) -> tuple[Any, ...]:
        """The shared document `data[start:]`, decoded (its sections in `_SECTIONS` order; the network
        section with its RDMA ports joined back)."""
        last = self.last_document
        if last is not None and len(data) - start == len(last[0]) and data.endswith(last[0]):
            return last[1]  # the rank before sent the same bytes: compared in place, no copy
        document = data[start:]
        found = self.documents.get(document)
        if found is None:
            refs = self._refs(document)
            if refs is not None:
                values = [self._learned(name, digest) for name, digest in zip(_SECTIONS, refs)]
            else:  # inline (a --out-dir file), or not digests at all: said section by section
                wire = decode(document, _SharedRaw, max_bytes=MAX_PAYLOAD_BYTES)
                values = [self._section(name, getattr(wire, name)) for name in _SECTIONS]
            # The host's network section whole again (model/host_parts.py), once per distinct document:
            # both of its parts are in it, so no rank pays for the join.
            values[_NETWORK] = self.joined((values[_NETWORK], values[_IB_PORTS]), join_network)
            found = tuple(values)
            if len(self.documents) >= _DOCUMENTS_KEPT:  # bounded: a few hosts' worth, not the job's
                self.documents.clear()
            self.documents[document] = found
        self.last_document = (document, found)
        return found


_DOCUMENTS_KEPT = 256
_OWN_KEPT = 1024
_STRINGS_KEPT = 1 << 14
_ABSENT: Any = object()


def _digest_of(raw: msgspec.Raw) -> str:
    """The digest a section names when it came by reference (a JSON string of DIGEST_CHARS hex
    digits); "" when the section is inline, and BadPayload for a string that is no digest."""
    data = bytes(raw)
    if not data.startswith(b'"'):
        return ""
    if not _DIGEST.fullmatch(data):
        raise BadPayload(f"a shared section given as {data[:40]!r}: neither a value nor a digest")
    return data[1:-1].decode()


_DIGEST = re.compile(f'"{_HEX_DIGEST}"'.encode())

# One rank's facts and findings are a few KB to a few hundred KB (a large environment); far more is
# not a preflight payload, and is refused before it is parsed.
MAX_PAYLOAD_BYTES = 8 << 20
