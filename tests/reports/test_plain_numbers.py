"""What the terminal says stays whole and agrees with itself (issue 45, item 3): the headline never
cuts a number, its counts are the last line's, a host nobody named is said in words, an interrupted
run's header names no `auto` backend."""

from __future__ import annotations

from preflight.checks import device_probe, storage
from preflight.model import Finding, Severity
from preflight.model.storage import Room
from preflight.reports.common import check_summary
from preflight.reports.text import render
from tests.helpers.facts import built_report, host_facts

SLOW = ("all_reduce on dp group 0 (ranks 0,1) at 64 MiB: busbw 0.983 GB/s is 0.98% of the expected 100 GB/s "
        "(--expect), which is far below what any healthy fabric of this kind gives")


def _findings() -> list[Finding]:
    return [Finding("BW007", Severity.ERROR, SLOW, ranks=[0, 1], hosts=["n1"]),
            Finding("BW009", Severity.COULD_NOT_RUN, "x"), Finding("RUN012", Severity.COULD_NOT_RUN, "y"),
            Finding("BW010", Severity.WARN, "z"), Finding("RUN009", Severity.INFO, "i")]


def test_the_headline_never_cuts_a_number_and_its_counts_are_the_last_lines() -> None:
    report = built_report(host_facts(["n1", "n2"]), _findings())
    assert "100 GB/s" in report.why and "0.98%" in report.why and "…" in report.why, report.why
    assert report.why.endswith("(1 error, 2 could not run, 1 warning)")
    assert check_summary(report).endswith("; 1 error, 2 could not run, 1 warning, 1 info")
    lines = render(report).splitlines()
    assert lines[0].endswith("(1 error, 2 could not run, 1 warning)")
    assert lines[-1].endswith("; 1 error, 2 could not run, 1 warning, 1 info")


def test_a_clean_run_says_no_findings_on_its_last_line() -> None:
    assert check_summary(built_report(host_facts(["n1"]))).endswith("; no findings")


def test_an_interrupted_run_names_no_auto_backend() -> None:
    from preflight.model import World
    from preflight.options import RunOptions
    from preflight.steps.verdict import RunRecord, build_report

    facts = host_facts(["n1", "n2"])
    record = RunRecord(World(launcher="slurm", rank=0, world_size=2, host="n1"),
                       RunOptions.build(mesh="tp2").for_world(2))
    record.facts, record.all_facts, record.interrupted = facts[0], facts, "SIGTERM"
    report = build_report(record)
    assert report.meta.backend == ""
    assert "mesh tp2, backend none chosen (the probes did not run)" in render(report)
    assert "backend auto" not in render(report)


def test_free_space_and_inodes_are_human_readable() -> None:
    [room] = storage.no_room.report(Room("/ckpt", "bytes", 80_025_714_114, 800 << 30, 2.0, ["n1"]))
    assert room.message.startswith("/ckpt: 74.5 GiB free, less than one checkpoint"), room.message
    [inodes] = storage.no_inodes.report(Room("/ckpt", "inodes", 16_239_519, 20_000_000, 2.0, ["n1"]))
    assert "16,239,519 inodes free" in inodes.message and "20,000,000 inodes for one" in inodes.message


def test_a_host_nobody_named_is_said_in_words() -> None:
    [found] = device_probe.device_could_not_run.report(rank=1, host="", figure="gemm_fp32", why="raised")
    assert found.message.startswith("rank 1 on an unknown host: gemm_fp32"), found.message


def test_the_authenticated_line_is_plain_on_a_laptop_run() -> None:
    """One process has nothing to authenticate: no jargon about forged verdicts (issue 45)."""
    from preflight.reports.common import authentication_text

    alone = built_report(host_facts(["laptop"]))
    assert authentication_text(alone) == "not needed (one process: no other rank sends it anything)"
    several = built_report(host_facts(["n1", "n2"]))
    assert authentication_text(several).startswith("no (no PREFLIGHT_SECRET: another program")
