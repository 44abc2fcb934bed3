"""The wire form rank 0 reads (channel/wire.from_wire: a rank's own document, a newline, the shared
one), mutated, never crashes: a RankPayload of typed fields or BadPayload, and a bad document
never spoils what rank 0 holds for the next rank that sends the same sections."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from preflight.channel.wire import RankPayload, SharedSections, from_wire, to_wire
from preflight.model import CheckOutcome, RankFacts
from preflight.model.codec import BadPayload
from tests.fuzz.strategies import FUZZ, mutated, to_bytes
from tests.helpers.synthetic import big_report

_REPORT = big_report(world_size=2, ranks_per_host=2, mesh="dp2", env_size=3)
WIRE = to_wire(RankPayload(rank=1, facts=_REPORT.ranks[1], findings=_REPORT.findings[:2], outcomes=_REPORT.checks[:3]))
OWN, SHARED = (msgspec.json.decode(part) for part in WIRE.split(b"\n", 1))


def _read(data: bytes, shared: SharedSections) -> None:
    try:
        payload = from_wire(data, shared)
    except BadPayload:
        return
    assert isinstance(payload.facts, RankFacts) and isinstance(payload.facts.host, str)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in payload.facts.env.items())
    assert all(isinstance(o, CheckOutcome) for o in payload.outcomes)
    assert len(payload.outcome_us) == len(payload.outcomes)
    assert all(isinstance(us, int) for us in payload.outcome_us)


def _check(data: bytes) -> None:
    shared = SharedSections()
    good = from_wire(WIRE, shared)  # what rank 0 holds: the mutated bytes come after it
    _read(data, shared)
    assert from_wire(WIRE, shared) == good


@FUZZ
@given(mutated(OWN))
def test_a_mutated_own_document_reads_or_is_bad_payload(own: dict) -> None:
    _check(to_bytes(own) + b"\n" + msgspec.json.encode(SHARED))


@FUZZ
@given(mutated(SHARED))
def test_a_mutated_shared_document_reads_or_is_bad_payload(shared: dict) -> None:
    _check(msgspec.json.encode(OWN) + b"\n" + to_bytes(shared))


@FUZZ
@given(st.integers(min_value=0, max_value=len(WIRE)), st.binary(max_size=8), st.integers(min_value=0, max_value=8))
def test_cut_spliced_or_without_its_newline_reads_or_is_bad_payload(at: int, insert: bytes, cut: int) -> None:
    _check(WIRE[:at] + insert + WIRE[at + cut:])
    _check(WIRE.replace(b"\n", insert, 1))
    _check(WIRE[:at])
