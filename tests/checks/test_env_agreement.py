"""Environment drift: grouping, classification, secrets, and compactness at 4096 ranks."""

from __future__ import annotations

import io
import random

from preflight.checks.env_agreement import is_collective, is_per_rank
from preflight.model import JobReport, ReportMeta
from preflight.reports import terminal, text
from tests.helpers.facts import cluster, run

BASE = {"NCCL_IB_HCA": "mlx5_0", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "HOME": "/home/u", "PATH": "/bin"}


def test_identical_environments_are_silent() -> None:
    ranks = cluster(4, 2, env=BASE)
    assert run("ENV003", ranks) == [] and run("ENV004", ranks) == []


def test_per_rank_launcher_variables_are_expected_to_differ() -> None:
    ranks = cluster(2, 2, env=BASE)
    for facts in ranks:
        facts.env.update({"RANK": str(facts.rank), "SLURM_PROCID": str(facts.rank), "HOSTNAME": facts.host,
                          "CUDA_VISIBLE_DEVICES": str(facts.world.local_rank), "PMIX_RANK": str(facts.rank)})
    assert run("ENV003", ranks) == [] and run("ENV004", ranks) == []
    assert is_per_rank("OMPI_COMM_WORLD_LOCAL_RANK") and not is_per_rank("NCCL_IB_HCA")
    assert is_collective("NCCL_IB_HCA") and is_collective("LD_PRELOAD") and not is_collective("HOME")


def test_collective_drift_is_a_warning_grouped_by_value() -> None:
    ranks = cluster(15, 8, env=BASE)
    for facts in ranks[48:56]:
        del facts.env["NCCL_IB_HCA"]  # node007
    [finding] = run("ENV003", ranks)
    assert finding.severity.value == "warn"
    assert finding.message == "NCCL_IB_HCA: `mlx5_0` on 14 hosts, unset on node007"
    assert finding.hosts == ["node007"] and finding.ranks == list(range(48, 56))


def test_partial_host_drift_names_ranks() -> None:
    ranks = cluster(2, 4, env=BASE)
    ranks[5].env["LD_LIBRARY_PATH"] = "/opt/other/lib:" + "x" * 80
    [finding] = run("ENV003", ranks)
    assert finding.message.startswith("LD_LIBRARY_PATH: `/usr/local/cuda/lib64` on 2 hosts, `/opt/other/lib:xxx")
    assert finding.message.endswith("...` on node002 (rank 5)")


def test_other_drift_is_one_info() -> None:
    ranks = cluster(2, 2, env=BASE)
    for index, facts in enumerate(ranks):
        facts.env.update({f"OTHER_{n}": str(index) for n in range(8)})
    [finding] = run("ENV004", ranks)
    assert finding.severity.value == "info"
    assert finding.message.startswith("8 other variable(s) differ across ranks: OTHER_0,")
    assert "(+2 more)" in finding.message and len(finding.data["variables"]) == 8


def test_secrets_compare_by_digest_and_show_redacted() -> None:
    ranks = cluster(3, 1, env={"HF_TOKEN": "<redacted>:aaaaaaaaaaaa"})
    ranks[2].env["HF_TOKEN"] = "<redacted>:bbbbbbbbbbbb"
    [finding] = run("ENV004", ranks)
    summary = finding.data["variables"]["HF_TOKEN"]
    assert summary == "HF_TOKEN: <redacted #1> on 2 hosts, <redacted #2> on node003"
    bare = cluster(3, 1, env={"HF_TOKEN": "<redacted>"})  # no key (no store): not comparable
    assert run("ENV004", bare) == []


def _big_report() -> JobReport:
    """4096 ranks on 512 hosts with 3 drifting collective variables, in messy patterns."""
    ranks = cluster(512, 8, env=BASE)
    rng = random.Random(7)
    for facts in ranks[8 * 100: 8 * 101]:
        del facts.env["NCCL_IB_HCA"]
    for host in rng.sample(range(512), 200):
        for facts in ranks[8 * host: 8 * host + 8]:
            facts.env["LD_LIBRARY_PATH"] = "/opt/cuda-12.1/lib64:/usr/lib"
    for facts in rng.sample(ranks, 300):
        facts.env["NCCL_SOCKET_IFNAME"] = rng.choice(["ib0", "eth0", "=ib1"])
    findings = run("ENV003", ranks)
    assert len(findings) == 3
    meta = ReportMeta(launcher="slurm", job_id="1", run_id="r", world_size=4096, num_nodes=512,
                      master_addr="node001", master_port=29500)
    return JobReport(meta=meta, findings=findings, verdict="passed with warnings", exit_code=0, why="3 warnings")


def test_three_drifting_variables_over_4096_ranks_stay_compact(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # a common terminal width
    report = _big_report()
    plain = text.render(report).splitlines()
    start = next(i for i, line in enumerate(plain) if line.startswith("severity"))
    end = plain.index("", start)
    rows = plain[start + 2: end]  # the findings table's rows, without its two header lines
    assert len(rows) <= 10, "\n".join(plain)
    stream = io.StringIO()
    terminal.render(report, _Terminal(stream))
    lines = stream.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "severity" in line)
    content = [line for line in lines[start + 2:] if line.startswith("│")]  # rows inside the table borders
    assert len(content) <= 11, stream.getvalue()


class _Terminal(io.TextIOBase):
    """A 160-column 'terminal' for rich (isatty is all rich asks)."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def write(self, data: str) -> int:
        return self.stream.write(data)

    def isatty(self) -> bool:
        return False


def test_on_one_host_drift_names_ranks_and_an_empty_value_is_labelled() -> None:
    """One host tells no group apart: `unset on ranks 0-1,3, `INFO` on rank 2`, not `unset on vm, INFO on vm`."""
    ranks = cluster(1, 4, env=BASE)
    ranks[2].env["NCCL_DEBUG"] = "INFO"
    ranks[3].env["NCCL_SOCKET_IFNAME"] = ""
    for facts in ranks[:3]:
        facts.env["NCCL_SOCKET_IFNAME"] = "eth0"
    messages = sorted(f.message for f in run("ENV003", ranks))
    assert messages == ["NCCL_DEBUG: unset on ranks 0-1,3, `INFO` on rank 2",
                        "NCCL_SOCKET_IFNAME: `eth0` on ranks 0-2, (empty) on rank 3"], messages
