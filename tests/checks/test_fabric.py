"""The NVLink fabric checks (checks/fabric.py, GPU014) on facts the real gatherer read from the NVML
replay FAKE (tests/fixtures/nvml/gb200_nvl72.json and its kin) and a FAKE /dev;
test_fabric_multirank.py fires them in a real run."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.model import RankFacts, Severity
from tests.checks.test_gpu_health import gpu_findings
from tests.steps.gather.test_gpu_health import fake_dev, gathered

FABRIC_CHECKS = {"GPU014", "GPU022", "GPU034", "GPU035"}
RACK1 = "2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01"
RACK2 = "7f0e9a41-3c2d-4e8b-a1f5-0d6c2b9e8a17"


def on(facts: RankFacts, rank: int, host: str) -> RankFacts:
    facts.rank, facts.host = rank, host
    return facts


def fabric_findings(ranks: list[RankFacts]) -> dict[str, list[str]]:
    return {k: [p.message for p in v] for k, v in gpu_findings(ranks).items() if k in FABRIC_CHECKS}


def tray(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fixture: str, gpu: str, rank: int, host: str,
         imex: bool = True) -> RankFacts:
    folder = tmp_path / f"{host}-{rank}"
    folder.mkdir()
    dev = fake_dev(folder, *(["channel0"] if imex else []))
    return on(gathered(monkeypatch, fixture, gpu, dev_root=dev), rank, host)


def test_a_healthy_nvl72_job_is_silent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ranks = [tray(monkeypatch, tmp_path, "gb200_nvl72", str(r % 4), r, f"tray{r // 4}") for r in range(8)]
    assert fabric_findings(ranks) == {}
    h100 = [on(gathered(monkeypatch, "healthy_h100x8", str(r)), r, f"hgx{r // 4}") for r in range(8)]
    assert fabric_findings(h100) == {}  # single-node NVSwitch: no cluster UUID, no IMEX needed
    a100 = [on(gathered(monkeypatch, "a100_no_fabric", str(r)), r, f"a{r}") for r in range(2)]
    assert fabric_findings(a100) == {}  # NotSupported before Hopper: GPU021's info, no fabric finding


def test_each_fabric_health_fault_names_its_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ranks = [tray(monkeypatch, tmp_path, "gb200_fabric_faults", str(r), r, "tray0") for r in range(4)]
    found = fabric_findings(ranks)
    assert found == {"GPU022": [
        "GPU 0 (00000008:01:00.0) of rank 0 on tray0: NVLink fabric reports degraded bandwidth",
        "GPU 1 (00000009:01:00.0) of rank 1 on tray0: NVLink fabric reports fabric manager down (global fabric "
        "manager disconnected)",
        "GPU 2 (00000018:01:00.0) of rank 2 on tray0: NVLink fabric reports too few NVLinks"]}, found
    assert ranks[3].health.gpus[0].fabric.waited_s > 0  # GPU 3 was transient and settled: no finding


def test_a_registration_still_in_progress_after_the_grace_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    found = fabric_findings([gathered(monkeypatch, "assorted_faults", "5")])
    assert found == {"GPU014": ["GPU 5 (00000000:AB:00.0) of rank 0 on node01 fabric state is in progress (still, "
                                "after reading it again for 0.05 s)"]}


def test_a_gpu_in_another_clique_than_its_siblings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ranks = [tray(monkeypatch, tmp_path, "gb200_rack2", str(r), r, "r2tray0") for r in range(4)]
    found = gpu_findings(ranks)
    (problem,) = found["GPU034"]
    assert problem.message == (f"r2tray0: the GPUs of rank(s) 1 are in NVLink domain(s) {RACK2}/4; their "
                               f"siblings on the host are in {RACK2}/32766")
    assert problem.ranks == [1] and problem.hosts == ["r2tray0"] and problem.severity is None  # the check's: error


def test_hosts_of_one_rack_in_different_cliques(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """rack2's trays: tray A on GPUs 0,2 (clique 32766), tray B bound only to GPU 1 (clique 4), tray C 0,2."""
    placed = [("A", "0"), ("A", "2"), ("B", "1"), ("C", "0"), ("C", "2")]
    ranks = [tray(monkeypatch, tmp_path, "gb200_rack2", gpu, r, f"tray{host}") for r, (host, gpu) in enumerate(placed)]
    (problem,) = gpu_findings(ranks)["GPU034"]
    assert problem.message == (f"NVLink cluster {RACK2}: trayB is in clique 4; the job's other hosts of the cluster "
                               "are in clique 32766: they reach each other over the network, not NVLink")
    assert problem.hosts == ["trayB"] and problem.ranks == [2] and problem.severity == Severity.WARN


def test_a_host_of_a_multi_node_domain_without_an_imex_channel(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    ranks = [tray(monkeypatch, tmp_path, "gb200_nvl72", str(r % 4), r, f"tray{r // 4}", imex=r < 4) for r in range(8)]
    (message,) = fabric_findings(ranks)["GPU035"]
    assert message == (f"tray1 is in the multi-node NVLink domain {RACK1}/32766 with 1 other host(s) of the job but "
                       "has no IMEX channel (/dev/nvidia-caps-imex-channels/channel0)")
    alone = [tray(monkeypatch, tmp_path, "gb200_nvl72", str(r), 10 + r, "solo", imex=False) for r in range(4)]
    assert "GPU035" not in fabric_findings(alone)  # one host of the domain in the job: no IMEX needed


def test_gpu034_and_gpu035_read_each_ranks_domain_once_per_job(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """At 131,072 ranks each pass over every rank's health costs ~0.3 s: the two checks share one."""
    from preflight.checks import fabric

    ranks = [tray(monkeypatch, tmp_path, "gb200_nvl72", str(r % 4), r, f"tray{r // 4}", imex=r < 4) for r in range(8)]
    calls = []
    real = fabric.nvlink_domain
    monkeypatch.setattr(fabric, "nvlink_domain", lambda facts: calls.append(facts.rank) or real(facts))
    fabric._in_domains.forget()
    found = fabric_findings(ranks)
    assert list(found) == ["GPU035"] and "tray1" in found["GPU035"][0]  # what they find is unchanged
    assert sorted(calls) == list(range(8))
