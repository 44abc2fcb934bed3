"""GPU checks on facts gathered from the NVML replay FAKE (tests/fixtures/nvml/): each fires on its
fixture's faulty GPU and is silent on the healthy host and on the faulty host's healthy GPUs.

The facts come from the real gatherers (steps/gather/gpus.py, gpu_health.py) reading the fixture
through the one NVML boundary; test_health_multirank.py fires the same checks in a real run.
"""

from __future__ import annotations

import pytest

from preflight.model import RankFacts, Severity
from preflight.registry import CheckContext, JobView, all_checks
from tests.helpers.facts import rank_facts, run
from tests.steps.gather.test_gpu_health import gathered

GPU_CHECKS = [spec for spec in all_checks() if spec.tag == "gpu" and spec.scope != "engine"]


def gpu_findings(ranks: list[RankFacts], backend: str = "gloo") -> dict[str, list]:
    """Every GPU check's findings over these ranks (local checks on each, cross checks on all)."""
    found: dict[str, list] = {}
    for spec in GPU_CHECKS:
        if spec.scope == "local":
            problems = [p for f in ranks for p in spec.func(f, CheckContext(world_size=len(ranks), backend=backend))]
        else:
            problems = list(spec.func(JobView(world_size=len(ranks), backend=backend, ranks=ranks)))
        if problems:
            found[spec.id] = problems
    return found


FAULTS = [  # fixture, the faulty GPU, what fires on it
    ("remap_pending", "3", {"GPU004", "GPU007"}),
    ("recovery_reset", "2", {"GPU008"}),
    ("pcie_degraded", "4", {"GPU011"}),
    ("hw_slowdown", "6", {"GPU009"}),
    ("foreign_process", "1", {"GPU018"}),
    ("nvlink_inactive", "5", {"GPU031"}),
    ("not_supported", "0", {"GPU021"}),
    ("gpu_lost", "7", {"GPU003"}),
    ("assorted_faults", "0", {"GPU005"}),
    ("assorted_faults", "1", {"GPU006"}),
    ("assorted_faults", "2", {"GPU010"}),
    ("assorted_faults", "3", {"GPU012"}),
    ("assorted_faults", "4", {"GPU013"}),
    ("assorted_faults", "5", {"GPU014"}),
    ("assorted_faults", "6", {"GPU015", "GPU016", "GPU017"}),
    ("assorted_faults", "7", {"GPU019", "GPU020"}),
]


@pytest.mark.parametrize(("fixture", "device", "expected"), FAULTS, ids=[f"{f}-{d}" for f, d, _ in FAULTS])
def test_each_fault_fires_its_checks_only(monkeypatch: pytest.MonkeyPatch, fixture: str, device: str,
                                          expected: set[str]) -> None:
    facts = gathered(monkeypatch, fixture, device)
    found = gpu_findings([facts])
    assert set(found) == expected, {k: [p.message for p in v] for k, v in found.items()}
    for problems in found.values():
        assert all(p.ranks == [0] or not p.ranks for p in problems) and all(p.hosts == ["node01"] for p in problems)
    if fixture not in ("not_supported", "assorted_faults"):  # there every GPU has the fault(s)
        healthy_sibling = "0" if device != "0" else "1"
        assert gpu_findings([gathered(monkeypatch, fixture, healthy_sibling)]) == {}


def test_healthy_host_is_silent_on_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = []
    for local_rank in range(8):
        facts = gathered(monkeypatch, "healthy_h100x8", local_rank=local_rank, local_world_size=8)
        facts.rank = facts.world.rank = local_rank
        ranks.append(facts)
    assert gpu_findings(ranks, backend="nccl") == {}


def test_messages_say_what_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    recovery = gpu_findings([gathered(monkeypatch, "recovery_reset", "2")])["GPU008"][0]
    assert recovery.message == "GPU 2 (00000000:3A:00.0) of rank 0 on node01: the driver asks to reset the GPU"
    assert "reset the GPU" in (recovery.hint or "")
    foreign = gpu_findings([gathered(monkeypatch, "foreign_process", "1")])["GPU018"][0]
    assert "pid 4242 (python3 train_old.py)" in foreign.message
    nvlink = gpu_findings([gathered(monkeypatch, "assorted_faults", "4")])["GPU013"][0]
    assert "link 2: replay 3" in nvlink.message and "link 4: crc_flit 7, crc_data 2" in nvlink.message


def test_without_nvml_info_and_could_not_run_only_for_nccl() -> None:
    facts = rank_facts(0, "cpu1", health={"nvml": "unavailable: NVML Shared Library Not Found"})
    assert [f.severity for f in run("GPU001", facts, backend="nccl")] == [Severity.INFO]
    assert "NVML not available on cpu1" in run("GPU001", facts, backend="nccl")[0].message
    assert [f.severity for f in run("GPU002", facts, backend="nccl")] == [Severity.COULD_NOT_RUN]
    assert gpu_findings([facts], backend="gloo") == {} and gpu_findings([facts], backend="auto") == {}
    facts.health.nvidia_device_nodes = True  # a driver's device nodes, but NVML failed: worth saying
    assert gpu_findings([facts], backend="gloo").keys() == {"GPU001"}


def _bound(rank: int, host: str, index: int | None, bus: str = "", **health: object) -> RankFacts:
    gpus = [{"index": index, "pci_bus_id": bus, **health}] if index is not None else []
    return rank_facts(rank, host, world_size=4, local_world_size=2,
                      health={"nvml": "ok", "bound_index": index, "visible_gpus": 1, "gpus": gpus,
                              "bound_reason": "the one visible GPU" if index is not None else "no GPU visible"})


def test_two_ranks_on_one_gpu_and_a_rank_without_one() -> None:
    ranks = [_bound(0, "a", 0, "00:18", compute_mode=3), _bound(1, "a", 0, "00:18"),
             _bound(2, "b", 0, "00:18"), _bound(3, "b", None)]
    shared, missing = sorted(run("GPU030", ranks), key=lambda f: f.hosts)
    assert (shared.ranks, shared.hosts) == ([0, 1], ["a"]) and "exclusive-process" in shared.message
    assert (missing.ranks, missing.hosts) == ([3], ["b"]) and "no GPU to use" in missing.message


def test_ranks_sharing_a_gpu_under_their_own_nccl_host_ids_are_deliberate() -> None:
    # How the GPU tests put two ranks on one H100: NCCL accepts it, so GPU030 must not stop the probes.
    ranks = [_bound(0, "a", 0, "00:18"), _bound(1, "a", 0, "00:18")]
    ranks[0].env["NCCL_HOSTID"], ranks[1].env["NCCL_HOSTID"] = "h0", "h1"
    assert run("GPU030", ranks) == []
    ranks[1].env["NCCL_HOSTID"] = "h0"  # one host id: NCCL refuses ("Duplicate GPU detected")
    assert [f.ranks for f in run("GPU030", ranks)] == [[0, 1]]


def test_gpu_kind_and_vbios_across_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = []
    for rank, host in enumerate(["n1", "n2", "n3"]):
        facts = gathered(monkeypatch, "healthy_h100x8")
        facts.rank, facts.host = rank, host
        ranks.append(facts)
    assert run("GPU032", ranks) == [] and run("GPU033", ranks) == []
    ranks[2].gpus[0].name = "NVIDIA A100-SXM4-80GB"
    ranks[1].health.gpus[0].vbios = "96.00.30.00.01"
    assert [(f.hosts, "A100" in f.message) for f in run("GPU032", ranks)] == [(["n3"], True)]
    ranks[2].gpus[0].name = ranks[0].gpus[0].name
    ranks[0].health.gpus[0].fabric.state = 0  # no NVSwitch on n1
    assert [f.message for f in run("GPU032", ranks)] == [
        "GPU topology on n1 is NVLink 4.x, 18 links; most hosts have NVLink 4.x, 18 links, NVSwitch"]
    assert [f.hosts for f in run("GPU033", ranks)] == [["n2"]]


HARDWARE_ACTIONS = ("drain", "reset", "reseat", "rma")


def test_list_and_explain_show_the_health_checks(capsys: pytest.CaptureFixture[str]) -> None:
    """`preflight list` tags them gpu / nic; `preflight explain` says what it means and what to do."""
    from preflight.commands.explain import print_explanation, print_list

    print_list()
    listed = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[2:]}
    health = [s for s in all_checks() if s.tag in ("gpu", "nic")]
    assert {s.id for s in health} >= {"GPU003", "GPU007", "GPU031", "NET002", "NET005", "NIC001", "NIC004"}
    for spec in health:
        assert listed[spec.id] == spec.tag
        print_explanation(spec.id)
        text = capsys.readouterr().out
        assert spec.explanation in text and f"What to do: {spec.hint}" in text
        if spec.blames_host:  # a faulty part: the hint names the hardware action
            assert any(action in spec.hint.lower() for action in HARDWARE_ACTIONS), (spec.id, spec.hint)


def test_a_real_h100s_answers_are_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recorded from a real H100 (driver 580): retired pages and NVLink NotSupported are no gap on it."""
    facts = gathered(monkeypatch, "real_h100_vm_580")
    (gpu,) = facts.health.gpus
    assert gpu.unavailable == [] and gpu.errors == [] and gpu.nvlinks == [] and gpu.nvlinks_read == 0
    assert (gpu.remap_pending, gpu.recovery_action, gpu.fabric.state, gpu.pcie_width) == (False, 0, 0, 16)
    assert gpu_findings([facts], backend="nccl") == {}
