"""A payload on the wire (channel/wire.py): the outcomes travel without their durations, merged on rank 0."""

from __future__ import annotations

import base64
import struct
import tracemalloc

import msgspec
import pytest

from preflight.channel.wire import MAX_CHECK_US, RankPayload, SharedSections, from_wire, merged_outcomes, to_wire
from preflight.model import CheckOutcome, RankFacts, Severity, World
from preflight.model.codec import BadPayload, encode
from preflight.steps.check_results import merge_outcomes


def _payload(rank: int, durations: tuple[float, float], status: Severity = Severity.OK) -> RankPayload:
    world = World(launcher="env", rank=rank, world_size=3, host="node", run_id="env")
    outcomes = [CheckOutcome("ENV001", "env", "local", "one", status, durations[0]),
                CheckOutcome("ENV002", "env", "local", "two", Severity.OK, durations[1])]
    return RankPayload(rank, RankFacts(rank=rank, host="node", world=world), outcomes=outcomes)


def _us(*durations: int) -> bytes:
    """The durations as they appear in a payload's JSON: 4-byte little-endian numbers, base64."""
    return b'"outcome_us":"' + base64.b64encode(struct.pack(f"<{len(durations)}I", *durations)) + b'"'


def test_outcomes_are_decoded_once_per_distinct_list_and_merge_as_the_report_merges_them() -> None:
    sent = [_payload(0, (0.1, 0.7)), _payload(1, (0.5, 0.2)), _payload(2, (0.3, 0.1), Severity.WARN)]
    shared = SharedSections()
    read = [from_wire(to_wire(p), shared) for p in sent]
    assert read[0].outcomes is read[1].outcomes and read[2].outcomes is not read[0].outcomes
    assert [list(r.outcome_us) for r in read] == [[100000, 700000], [500000, 200000], [300000, 100000]]  # microseconds
    expected = merge_outcomes(o for p in sent for o in p.outcomes)
    assert merge_outcomes(merged_outcomes(read)) == expected
    assert [(o.check_id, o.status, o.duration_s) for o in expected] == [
        ("ENV001", Severity.WARN, 0.5), ("ENV002", Severity.OK, 0.7)]


def test_durations_that_do_not_match_the_outcomes_are_a_bad_payload() -> None:
    raw = to_wire(_payload(1, (0.1, 0.2))).replace(_us(100000, 200000), _us(100000))
    with pytest.raises(BadPayload, match="1 check durations for 2 check outcomes"):
        from_wire(raw, SharedSections())


def test_ranks_with_one_environment_share_it_read_only_and_each_reads_its_own_variables() -> None:
    sent = [_payload(rank, (0.1, 0.2)) for rank in range(3)]
    for payload in sent:
        payload.facts.env = {"NCCL_IB_HCA": "mlx5", "RANK": str(payload.rank), "HOME": "/root"}
    sent[2].facts.env["NCCL_IB_HCA"] = "mlx5_1"
    shared = SharedSections()
    read = [from_wire(to_wire(p), shared) for p in sent]
    assert [r.facts.env for r in read] == [p.facts.env for p in sent]
    assert [r.facts.env["RANK"] for r in read] == ["0", "1", "2"]
    assert read[0].facts.env.shared is read[1].facts.env.shared  # decoded once, no copy per rank
    assert read[2].facts.env.shared is not read[0].facts.env.shared
    assert "RANK" not in read[0].facts.env.shared  # a per-rank variable is the rank's own


def test_a_section_seen_before_is_the_same_object_whether_it_came_just_before_or_earlier() -> None:
    shared = SharedSections()
    first, second = (msgspec.json.decode(encode(v), type=msgspec.Raw) for v in ({"A": "1"}, {"A": "2"}))
    got = [shared.get("env", raw) for raw in (first, first, second, first, second)]
    assert got == [{"A": "1"}, {"A": "1"}, {"A": "2"}, {"A": "1"}, {"A": "2"}]
    assert got[0] is got[1] is got[3] and got[2] is got[4] and len(shared.decoded) == 2


def test_the_longest_duration_of_each_check_is_found_across_thousands_of_ranks() -> None:
    """merged_outcomes takes the maximum a few thousand lists at a time: every chunk counts."""
    outcomes = _payload(0, (0.0, 0.0)).outcomes
    payloads = [RankPayload(rank, RankFacts(rank=rank, host="node", world=World(launcher="env", rank=rank,
                                                                                   world_size=9000)),
                            outcomes=outcomes, outcome_us=[rank * 100, (9000 - rank) * 100]) for rank in range(9000)]
    payloads[8500].outcome_us = [2_000_000, 0]  # in the third chunk
    assert [(o.check_id, o.duration_s) for o in merged_outcomes(payloads)] == [("ENV001", 2.0), ("ENV002", 0.9)]
    assert [o.duration_s for o in merged_outcomes(payloads[:1])] == [0.0, 0.9]


def test_the_longest_duration_is_read_unsigned_up_to_the_largest_a_rank_can_send() -> None:
    """rank 0 holds the durations as 4-byte unsigned numbers (from_wire's arrays): one past 2**31 is a
    long check, never a negative one that any other rank's would beat."""
    sent = [_payload(rank, (0.001, 0.002)) for rank in range(3)]
    sent[1].outcomes = [msgspec.structs.replace(o, duration_s=s) for o, s in zip(sent[1].outcomes, (2**31 / 1e6, 9e9))]
    shared = SharedSections()
    read = [from_wire(to_wire(p), shared) for p in sent]
    assert read[0].outcomes is read[1].outcomes is read[2].outcomes  # one group: its maximum is taken
    assert [o.duration_s for o in merged_outcomes(read)] == [2**31 / 1e6, MAX_CHECK_US / 1e6]


def test_a_rank_sends_its_own_document_then_the_shared_one_which_is_parsed_once_per_distinct_value() -> None:
    sent = [_payload(rank, (0.1, 0.2)) for rank in range(3)]
    for payload in sent:  # a newline inside a value is escaped: the first raw newline is the separator
        payload.facts.env = {"RANK": f"{payload.rank}\n", "NCCL_IB_HCA": "mlx5\nx"}
        payload.facts.world.raw = {"SLURM_PROCID": str(payload.rank), "SLURM_JOB_ID": "7"}
        payload.facts.world.local_rank = payload.facts.world.node_rank = payload.rank
    wires = [to_wire(p) for p in sent]
    assert all(w.count(b"\n") == 1 and w.startswith(b'{"rank":') for w in wires)
    shared = SharedSections()
    read = [from_wire(w, shared) for w in wires]
    assert [r.facts for r in read] == [p.facts for p in sent]
    assert len(shared.documents) == 1 and read[0].facts.network is read[2].facts.network
    worlds = [r.facts.world for r in read]  # the job's World once, each rank's own fields its own
    assert [(w.rank, w.local_rank, w.node_rank, w.raw["SLURM_PROCID"]) for w in worlds] == [(r, r, r, str(r))
                                                                                         for r in range(3)]
    assert worlds[0].raw.shared is worlds[2].raw.shared and "SLURM_PROCID" not in worlds[0].raw.shared
    with pytest.raises(BadPayload, match="no shared sections"):
        from_wire(wires[0].replace(b"\n", b" "), shared)


def test_durations_travel_as_whole_microseconds_and_come_back_as_the_seconds_that_were_measured() -> None:
    """run_checks rounds a duration to 1 us: as 4 bytes of microseconds it crosses the wire exactly (no
    float object per check per rank on rank 0, no JSON number to parse), and the merged outcome has the
    seconds again."""
    sent = _payload(1, (0.000244, 1.234567))
    wire = to_wire(sent)
    assert _us(244, 1234567) in wire
    read = from_wire(wire, SharedSections())
    assert list(read.outcome_us) == [244, 1234567]
    assert [o.duration_s for o in merged_outcomes([read])] == [0.000244, 1.234567]
    # Not durations: no base64, numbers (the layout before), bytes that are no whole number of 4-byte ones.
    five_bytes = b'"outcome_us":"' + base64.b64encode(b"12345") + b'"'
    for bad in (b'"outcome_us":"x!"', b'"outcome_us":[244,1234567]', five_bytes):
        with pytest.raises(BadPayload):
            from_wire(wire.replace(_us(244, 1234567), bad), SharedSections())
    # What a rank sends fits: clamped to 0 .. MAX_CHECK_US, the most 4 unsigned bytes hold (nothing else can arrive).
    assert _us(MAX_CHECK_US, 0) in to_wire(_payload(1, (1e9, -0.001)))


def test_rank_0_holds_a_ranks_durations_in_a_few_bytes_whatever_their_values() -> None:
    """On a GPU node checks take milliseconds: every duration is over 256 us, which Python keeps as an int
    object of its own (28 bytes, and a list's 8 per item): 131,072 ranks x 49 checks were ~180 MB of rank 0.
    What rank 0 holds for a rank's durations must not grow with their values."""
    checks = 40

    def held(seconds: float) -> int:
        shared = SharedSections()
        sent = []
        for rank in range(500):
            payload = _payload(rank, (0.0, 0.0))
            payload.outcomes = [CheckOutcome(f"ENV{i:03d}", "env", "local", "a check", Severity.OK, seconds * (1 + i))
                                for i in range(checks)]
            sent.append(to_wire(payload))
        from_wire(sent[0], shared)  # the shared sections decoded before measuring
        tracemalloc.start()
        try:
            read = [from_wire(w, shared) for w in sent]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert list(read[0].outcome_us) == [round(seconds * (1 + i) * 1e6) for i in range(checks)]
        return size

    small, large = held(0.000005), held(0.001)  # Python's shared ints (5-200 us); ints of their own (1-40 ms)
    # As lists: ~1,100 bytes a rank more (an int object a duration). Allowed: the measurement's own noise
    # (tracemalloc counts every allocation of the process meanwhile: ~17 bytes a rank seen in CI).
    assert large - small < 500 * 200, f"{(large - small) / 500:.0f} bytes more a rank for larger durations"


def test_the_stamp_and_the_agreeing_options_travel_and_equal_options_are_one_object() -> None:
    """The options every rank must agree on are in the shared part: ranks that sent the same share one dict."""
    from preflight.channel.wire import this_stamp

    sent = [_payload(rank, (0.1, 0.2)) for rank in range(3)]
    for payload in sent:
        payload.stamp, payload.options = this_stamp(), {"--sizes": "64K", "--ops": "all_reduce"}
    sent[2].options = {"--sizes": "128K", "--ops": "all_reduce"}
    shared = SharedSections()
    read = [from_wire(to_wire(p), shared) for p in sent]
    assert [r.stamp for r in read] == [this_stamp()] * 3 and [r.options for r in read] == [p.options for p in sent]
    assert read[0].options is read[1].options and read[2].options is not read[0].options


def test_a_payload_of_another_layout_is_named_by_its_stamp_not_as_unreadable() -> None:
    """Another preflight's payload that does not decode: its stamp is read alone, and RUN011 names it
    (with its version) where RUN002 would only say it could not be read."""
    from preflight.channel.collected import Collected, accept
    from preflight.channel.wire import this_stamp
    from preflight.options.agreement import disagreements

    future = b'{"rank":1,"layout":"new","stamp":{"preflight":"2.0.0","wire":7}}\n{"sections":[]}'
    garbage = b'{"rank":2}\nnot json'
    collected = Collected()
    accept(collected, 1, future)
    accept(collected, 2, garbage)
    assert set(collected.bad_payloads) == {1, 2} and collected.stamps == {1: type(this_stamp())("2.0.0", 7)}
    own = _payload(0, (0.1, 0.2))
    own.stamp, own.options = this_stamp(), {"--sizes": "64K"}
    _, findings, _ = collected.merged_with(own)
    assert [f.ranks for f in findings if f.check_id == "RUN002"] == [[2]]  # the one with no stamp
    found = dict(disagreements(collected.agreement(own)))
    assert found == {"preflight version": {this_stamp().preflight: [0], "2.0.0": [1]},
                     "wire version": {str(this_stamp().wire): [0], "7": [1]}}
