"""The JobReport is plain data: a JSON round trip gives back the same report."""

from __future__ import annotations

import json
import os

from preflight.model import (
    CheckOutcome,
    Finding,
    GpuFacts,
    Interface,
    JobReport,
    NetworkFacts,
    ProbeResult,
    RankFacts,
    ReportMeta,
    Severity,
    Versions,
    World,
)
from preflight.model.codec import decode, encode, from_builtins, to_builtins, valid_text


def sample_report() -> JobReport:
    world = World(launcher="slurm", rank=1, world_size=2, host="n2", expected_hosts={0: "n1", 1: "n2"},
                  raw={"SLURM_PROCID": "1"}, decisions=["x"])
    facts = RankFacts(rank=1, host="n2", world=world, env={"A": "1"}, versions=Versions(torch="2.13"),
                      network=NetworkFacts(interfaces=[Interface("ib0")]), gpus=[GpuFacts(0)],
                      gather_errors={"gpu": "x"})
    return JobReport(
        meta=ReportMeta(launcher="slurm", job_id="7", run_id="slurm-7.0", world_size=2, num_nodes=2,
                        master_addr="n1", master_port=12007, phases={"facts": 0.1}),
        ranks=[facts],
        findings=[Finding("NCCL001", Severity.ERROR, "m", "h", [1], ["n2"], {"k": [1, 2]})],
        checks=[CheckOutcome("NCCL001", "nccl", "local", "t", Severity.ERROR, 0.01)],
        probes=[ProbeResult("tp", "all_reduce", 1024, 0, [0, 1], ["n1", "n2"], 0.001, 1.0, 1.0, {0: 0.001})],
        missing_ranks=[0], bad_hosts=["n2"], verdict="failed", exit_code=3, why="w",
    )


def test_json_round_trip_is_identity() -> None:
    report = sample_report()
    text = json.dumps(to_builtins(report))
    assert from_builtins(json.loads(text), JobReport) == report
    assert decode(encode(report), JobReport) == report


def test_text_the_os_gave_as_bytes_that_are_not_utf8_is_written_escaped() -> None:
    """os.environ holds a value of bytes that are not UTF-8 (a Latin-1 job name, a binary variable) as
    lone surrogates, which JSON cannot carry: written with those bytes escaped, keys too, never a failure."""
    latin1, binary = os.fsdecode(b"caf\xe9"), os.fsdecode(b"\xff\xfe")
    facts = sample_report().ranks[0]
    facts.env = {"JOB": latin1, binary: "x", "LONE": "\ud800", "OK": "café"}
    back = decode(encode(facts), RankFacts)
    assert back.env == {"JOB": "caf\\xe9", "\\xff\\xfe": "x", "LONE": "\\ud800", "OK": "café"}
    assert {valid_text(k): valid_text(v) for k, v in facts.env.items()} == back.env  # what the gatherers keep
    assert valid_text("café") == "café"


def test_severity_order_puts_could_not_run_between_warn_and_error() -> None:
    assert Severity.OK.rank < Severity.INFO.rank < Severity.WARN.rank < Severity.COULD_NOT_RUN.rank
    assert Severity.COULD_NOT_RUN.rank < Severity.ERROR.rank
    assert sample_report().worst() == Severity.ERROR
