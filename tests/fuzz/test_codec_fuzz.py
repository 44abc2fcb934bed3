"""The decoders where data enters: a peer's payload and a past report, mutated, never crash.

`decode(bytes, RankPayload)` raises only BadPayload; `reports.json.load` raises only BadPayload
or OSError, and a report it accepts renders to text, JUnit, the exclude list, the terminal
and HTML without an exception.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.channel.exchange import RankPayload
from preflight.channel.wire import SharedSections, from_wire, to_wire
from preflight.model import GpuFacts, RankFacts
from preflight.model.codec import MAX_DEPTH, BadPayload, _can_nest, decode, encode
from preflight.reports import exclude, html, junit, terminal, text
from preflight.reports import json as json_report
from tests.fuzz.strategies import FUZZ, FUZZ_SLOW, json_value, mutated, to_bytes
from tests.helpers.synthetic import big_report


def _payload_doc() -> dict:
    report = big_report(world_size=2, ranks_per_host=1, mesh="dp2", env_size=3)
    facts = report.ranks[1]
    return msgspec.json.decode(encode(RankPayload(rank=1, facts=facts, findings=report.findings[:2],
                                                  outcomes=report.checks[:2])))


PAYLOAD = _payload_doc()
_REPORT = big_report(world_size=2, ranks_per_host=1, mesh="dp2", env_size=3)
PAYLOAD_FACTS, FINDING = _REPORT.ranks[1], _REPORT.findings[0]


def _decode_payload(data: bytes) -> None:
    try:
        payload = decode(data, RankPayload)
    except BadPayload:
        return
    assert isinstance(payload, RankPayload) and isinstance(payload.facts, RankFacts)
    assert all(isinstance(v, str) for v in payload.facts.env.values())
    assert isinstance(payload.facts.host, str)


@FUZZ
@given(mutated(PAYLOAD))
def test_mutated_payload_decodes_or_is_bad_payload(doc: dict) -> None:
    _decode_payload(to_bytes(doc))


@FUZZ
@given(st.binary(max_size=300) | json_value.map(msgspec.json.encode))
def test_arbitrary_bytes_decode_or_are_bad_payload(data: bytes) -> None:
    _decode_payload(data)


@pytest.mark.parametrize("bad", [
    {"facts": {"host": {"name": "x"}}},  # a host given as a dict
    {"facts": {"env": ["A=1"]}},  # the env as a list
    {"facts": {"env": {"A": 1}}},  # a non-string env value
    {"facts": {"env": {"A": None}}},
    {"rank": "one"}, {"rank": 1.5},  # "1" is read as 1: the codec is lax on numbers in strings
])
def test_known_bad_shapes_are_bad_payload(bad: dict) -> None:
    doc = msgspec.json.decode(msgspec.json.encode(PAYLOAD))
    for key, value in bad.items():
        if isinstance(value, dict):
            doc[key].update(value)
        else:
            doc[key] = value
    with pytest.raises(BadPayload):
        decode(msgspec.json.encode(doc), RankPayload)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 100_000])
def test_deep_nesting_is_bad_payload(depth: int) -> None:
    doc = msgspec.json.decode(msgspec.json.encode(PAYLOAD))
    doc["findings"][0]["data"] = {"deep": f"__DEEP_{depth}__"}
    with pytest.raises(BadPayload):
        decode(to_bytes(doc), RankPayload)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900])
def test_deep_nesting_is_bad_payload_on_the_wire_and_in_any_free_form_type(depth: int) -> None:
    """The depth walk is skipped only for types that cannot nest (codec._can_nest): a peer's wire
    payload (its findings' data) and a free-form value are still walked."""
    data = to_bytes({"deep": f"__DEEP_{depth}__"})
    for into, raw in ((dict[str, Any], data), (list[Any], b"[" + data + b"]"), (Any, data)):
        with pytest.raises(BadPayload):
            decode(raw, into)
    deep = msgspec.json.decode(data)
    sent = RankPayload(rank=1, facts=PAYLOAD_FACTS, findings=[msgspec.structs.replace(FINDING, data=deep)])
    with pytest.raises(BadPayload):
        from_wire(to_wire(sent), SharedSections())
    assert not _can_nest(list[GpuFacts]) and not _can_nest(dict[str, str]) and _can_nest(RankPayload)


def test_oversized_input_is_refused_before_parsing() -> None:
    with pytest.raises(BadPayload, match="maximum"):
        decode(b" " * 1025, RankPayload, max_bytes=1024)
    with pytest.raises(BadPayload):
        decode(123, RankPayload)  # type: ignore[arg-type]


# A real report, as `--json` writes it, of a small failed run (probes, findings, drift).
REPORT_TEXT = json_report.dumps(big_report(world_size=4, ranks_per_host=2, mesh="dp2,tp2", env_size=4))
REPORT = msgspec.json.decode(REPORT_TEXT)


def _render_everything(path: Path) -> None:
    try:
        report = json_report.load(path)
    except (BadPayload, OSError):
        return
    assert len(list(report.ranks)) == len(report.ranks)  # built on first use (model/table_ranks.py): never fails
    text.render(report)
    junit.render(report)
    exclude.render(report)
    html.render(report)
    terminal.render(report, io.StringIO())


@FUZZ_SLOW
@given(mutated(REPORT))
def test_mutated_report_loads_and_renders_or_is_bad_payload(tmp_path_factory: pytest.TempPathFactory,
                                                            doc: dict) -> None:
    path = tmp_path_factory.mktemp("report") / "run.json"
    path.write_bytes(to_bytes(doc))
    _render_everything(path)


def test_unmutated_report_renders(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(REPORT_TEXT)
    _render_everything(path)
    assert json_report.load(path).exit_code == 3


def _integer_paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    """Every place in `doc` that holds an integer, the first two items of each list only."""
    if isinstance(doc, dict):
        return [p for key, value in doc.items() for p in _integer_paths(value, (*prefix, key))]
    if isinstance(doc, list):
        return [p for i, value in enumerate(doc[:2]) for p in _integer_paths(value, (*prefix, i))]
    return [prefix] if isinstance(doc, int) and not isinstance(doc, bool) else []


@pytest.mark.parametrize("huge", [10**400, -(10**400)], ids=["plus-huge", "minus-huge"])
def test_every_integer_of_a_report_out_of_any_range_loads_and_renders_or_is_bad_payload(
        tmp_path: Path, huge: int) -> None:
    """JSON integers have no size: a 400-digit one anywhere (a size a renderer turns into a float, an
    exit code the command exits with) is refused by the decoder or rendered, never an OverflowError."""
    import copy

    places = _integer_paths(REPORT)
    assert len(places) > 20
    for place in places:
        doc = copy.deepcopy(REPORT)
        parent = doc
        for key in place[:-1]:
            parent = parent[key]
        parent[place[-1]] = huge
        path = tmp_path / "run.json"
        path.write_bytes(msgspec.json.encode(doc))
        _render_everything(path)
    with pytest.raises(BadPayload, match="exit_code"):  # `preflight report` exits with it: refused
        json_report.loads(msgspec.json.encode({**REPORT, "exit_code": huge}))
