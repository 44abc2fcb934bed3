"""The storage section in every renderer: text, terminal, JSON (round trip), JUnit, HTML."""

from __future__ import annotations

import io
from pathlib import Path

from preflight.lib.storage_options import StorageOptions
from preflight.model import JobReport, ReportMeta
from preflight.model.codec import decode, encode
from preflight.model.storage import MountView, StoragePlan, StorageRead, StorageVisit, StorageWrote
from preflight.reports import html, junit, storage_table, terminal, text
from preflight.steps.storage import StorageOutcome
from preflight.steps.storage_judge import Judge

HOSTS = {0: "n1", 1: "n2", 2: "n3"}
NFS = MountView("/ckpt", "nfs4", "filer:/ckpt", "/", ["rw"])


def _report(tmp_path: Path) -> JobReport:
    visits = {r: StorageVisit(r, h, h != "n2", seen="" if h != "n2" else "no such file",
                              mount=NFS if h != "n2" else MountView("/ckpt", "ext4", "/dev/sda1", "/", ["rw"]),
                              free_bytes=2**40, free_inodes=-1 if h == "n1" else 10**6) for r, h in HOSTS.items()}
    judge = Judge(StorageOptions(str(tmp_path), checkpoint_size=800 * 2**30), StoragePlan("d", "x", 2**24), HOSTS,
                  visits)
    wrote = {r: StorageWrote(r, f"/ckpt/r{r}", 2**24, 0.02, "d") for r in judge.first_writers()}
    read = {reader: StorageRead(reader, writer, 2**24, 0.01, "d") for reader, writer in judge.pairs(0, wrote)}
    judge.add_pass(0, wrote, read)
    outcome = StorageOutcome(judge.section(1.5), judge.findings())
    return JobReport(ReportMeta("srun", "1", "run", 3, 3, "n1", 29500), findings=outcome.findings,
                     checks=outcome.outcomes(), storage=outcome.section)


def test_text_and_terminal_show_a_row_per_host_and_the_projection(tmp_path: Path) -> None:
    report = _report(tmp_path)
    plain = text.render(report)
    assert storage_table.TITLE in plain
    n1 = next(line for line in plain.splitlines() if line.startswith("n1 "))
    assert "nfs4 filer:/ckpt at /ckpt" in n1 and "yes" in n1 and "no limit" in n1 and "0.839" in n1
    n2 = next(line for line in plain.splitlines() if line.startswith("n2 "))
    assert "ext4 /dev/sda1 at /ckpt" in n2 and "NO" in n2 and "none" in n2
    assert "one save of 800 GiB ~ 8.53 min, one restore ~" in plain
    out = io.StringIO()
    terminal.render(report, out)
    shown = " ".join(out.getvalue().split())  # rich wraps to the console's width
    assert storage_table.TITLE in shown and "one save of 800 GiB" in shown


def test_json_round_trips_and_junit_and_html_carry_it(tmp_path: Path) -> None:
    report = _report(tmp_path)
    assert decode(encode(report), JobReport).storage == report.storage
    cases = {c.get("name").split(":")[0]: c for c in junit.build(report).getroot().iter("testcase")}
    assert {f"STO00{i}" for i in range(1, 10)} <= set(cases)
    assert cases["STO001"].find("failure") is not None and cases["STO007"].find("failure") is None
    page = html.render(report)
    assert '<section id="storage">' in page and "nfs4 filer:/ckpt at /ckpt" in page
    assert "one save of 800 GiB" in page
    assert '<section id="storage">' not in html.render(JobReport(report.meta))
