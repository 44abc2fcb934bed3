"""The NVML boundary (nvml_source.py) and the GPU health gatherer, on the replay FAKE of NVML.

No GPU exists on CI machines: PREFLIGHT_NVML_REPLAY points the one boundary at a fixture file
(tests/fixtures/nvml/, format in docs/testing.md). The real NVML is tried too: on a machine
without the driver it must say "unavailable", never raise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.lib import nvml_source
from preflight.model import RankFacts, World
from preflight.steps.gather import GatherOptions, gpu_health, gpus
from preflight.steps.gather.gpu_health import bind, read_health, take_xid_watch, visible_indices

FIXTURES = Path(__file__).parents[2] / "fixtures" / "nvml"
SHORT_GRACE_S = 0.05  # how long a transient fabric state is read again here (GatherOptions.settle_grace_s)


def gathered(monkeypatch: pytest.MonkeyPatch, fixture: str | None, visible: str | None = None,
             local_rank: int = 0, local_world_size: int = 1, dev_root: Path | None = None) -> RankFacts:
    """A rank's facts after the gpus and gpu-health gatherers ran on `fixture` (None: the real NVML and /dev);
    `dev_root`: a FAKE /dev (IMEX channels), else one with no device nodes."""
    if fixture:
        monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(FIXTURES / f"{fixture}.json"))
        monkeypatch.setenv(gpu_health.DEV_ROOT_VARIABLE, str(dev_root or FIXTURES / "no-such-dev"))
    else:
        monkeypatch.delenv(nvml_source.REPLAY_VARIABLE, raising=False)
        monkeypatch.delenv(gpu_health.DEV_ROOT_VARIABLE, raising=False)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    facts = RankFacts(rank=0, host="node01", world=World("env", 0, local_world_size, local_rank=local_rank,
                                                         local_world_size=local_world_size, host="node01"))
    options = GatherOptions(settle_grace_s=SHORT_GRACE_S)
    gpus.gather(facts, options)
    gpu_health.gather(facts, options)
    return facts


def opened(fixture: str, monkeypatch: pytest.MonkeyPatch, deadline_s: float = 30) -> nvml_source.Nvml:
    monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(FIXTURES / f"{fixture}.json"))
    nvml, why = nvml_source.open_nvml(deadline_s)
    assert nvml is not None, why
    return nvml


def test_healthy_h100_host_reads_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "healthy_h100x8", local_rank=3, local_world_size=8)
    assert facts.health.nvml == "ok" and facts.health.bound_index == 3 and facts.health.visible_gpus == 8
    assert [g.nvlink_active for g in facts.gpus] == [18] * 8 and facts.gpus[0].nvlink_version == 4
    assert facts.versions.driver == "550.54.15" and facts.versions.cuda_driver == "12.4"
    (gpu,) = facts.health.gpus
    assert (gpu.index, gpu.pci_bus_id, gpu.unavailable, gpu.errors, gpu.lost) == (3, "00000000:5D:00.0", [], [], False)
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_enabled, gpu.ecc_pending) == (0, True, False)
    assert (gpu.remap_pending, gpu.remap_failure, gpu.recovery_action, gpu.clock_event_reasons) == (False, False, 0, 1)
    assert (gpu.pcie_width, gpu.pcie_max_width, gpu.pcie_gen, gpu.pcie_max_gen) == (16, 16, 5, 5)
    assert gpu.nvlinks_read == 18 and gpu.nvlinks == []  # only links worth a look are kept
    assert (gpu.fabric.state, gpu.fabric.status, gpu.fabric.domain, gpu.fabric.waited_s) == (3, 0, "", 0.0)
    assert (gpu.persistence_mode, gpu.compute_mode) == (True, 0)
    assert (gpu.processes, gpu.temperature_c, gpu.slowdown_c, gpu.vbios) == ([], 34, 87, "96.00.74.00.1C")
    assert gpu.power_limit_mw == gpu.power_default_mw == 700000


def test_faults_map_to_their_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gathered(monkeypatch, "remap_pending", "3").health.gpus[0].remap_pending is True
    assert gathered(monkeypatch, "recovery_reset", "2").health.gpus[0].recovery_action == 1
    assert gathered(monkeypatch, "pcie_degraded", "4").health.gpus[0].pcie_width == 8
    assert gathered(monkeypatch, "hw_slowdown", "6").health.gpus[0].clock_event_reasons == 72
    procs = gathered(monkeypatch, "foreign_process", "1").health.gpus[0].processes
    assert [(p.pid, p.name) for p in procs or []] == [(4242, "python3 train_old.py")]
    inactive = gathered(monkeypatch, "nvlink_inactive", "5")
    assert [link.link for link in inactive.health.gpus[0].nvlinks if not link.active] == [7]
    assert inactive.gpus[5].nvlink_active == 17


def test_not_supported_is_listed_never_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = gathered(monkeypatch, "not_supported").health.gpus[0]
    assert gpu.errors == [] and not gpu.lost
    missing = {"ecc_errors", "remapped_rows", "recovery_action", "clock_event_reasons", "processes"}
    assert missing <= set(gpu.unavailable)
    assert "nvlink_state" not in gpu.unavailable  # no NVLink at all is not a missing read
    assert (gpu.ecc_uncorrected_volatile, gpu.remap_pending, gpu.recovery_action, gpu.processes) == (None,) * 4


def fake_dev(folder: Path, *channels: str) -> Path:
    """A FAKE /dev with these IMEX channel nodes (plain files: only their names are read)."""
    imex = folder / "dev" / gpu_health.IMEX_CHANNELS
    imex.mkdir(parents=True)
    for name in channels:
        (imex / name).touch()
    return folder / "dev"


def test_gb200_fabric_info_names_its_nvlink_domain_and_imex_channel(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    facts = gathered(monkeypatch, "gb200_nvl72", "2", dev_root=fake_dev(tmp_path, "channel0"))
    (gpu,) = facts.health.gpus
    assert gpu.fabric is not None and gpu.unavailable == [] and gpu.errors == []
    assert gpu.fabric.domain == "2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01/32766"
    assert (gpu.fabric.health_mask, gpu.fabric.health_summary, gpu.fabric.waited_s) == (20906, 1, 0.0)
    assert facts.health.imex_channels == ["channel0"]
    assert gathered(monkeypatch, "gb200_nvl72", "2").health.imex_channels == []  # no node: none to open


def test_pre_hopper_fabric_info_is_a_listed_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    (gpu,) = gathered(monkeypatch, "a100_no_fabric", "0").health.gpus
    assert gpu.fabric is None and "fabric_info" in gpu.unavailable and gpu.errors == []


def test_an_a100s_twelve_nvlinks_end_at_link_12_with_nothing_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An A100 has 12 NVLinks (indices 0-11); NVML_NVLINK_MAX_LINKS bounds every architecture, and the driver
    answers INVALID_ARGUMENT for a link past the GPU's own (as the replay does): the end of its links, neither
    an unavailable read nor an error (a GPU without NVLink at all: test_not_supported_is_listed_never_a_value)."""
    from preflight.lib import nvml_source

    (gpu,) = gathered(monkeypatch, "a100_no_fabric", "0").health.gpus
    assert (gpu.nvlinks_read, gpu.unavailable, gpu.errors) == (12, ["fabric_info"], [])
    nvml, _ = nvml_source.open_nvml(10.0)
    assert nvml is not None
    with pytest.raises(nvml_source.NvmlError) as past:
        nvml.read(nvml.handle(0), "nvlink_state", 12)
    assert past.value.code == nvml_source.INVALID_ARGUMENT and not past.value.unavailable


def test_a_transient_fabric_state_is_read_again_before_it_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 3 goes in progress -> route recovery -> healthy while it is read again: it settles.
    assorted_faults' GPU 5 stays in progress: kept as read, after the whole grace."""
    (settled,) = gathered(monkeypatch, "gb200_fabric_faults", "3").health.gpus
    assert settled.fabric is not None and (settled.fabric.state, settled.fabric.health_mask) == (3, 20906)
    assert 0 < settled.fabric.waited_s < SHORT_GRACE_S
    (stuck,) = gathered(monkeypatch, "assorted_faults", "5").health.gpus
    assert stuck.fabric is not None and stuck.fabric.state == 2 and stuck.fabric.waited_s == SHORT_GRACE_S


def test_lost_gpu_keeps_its_index_and_stops_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "gpu_lost", "7")
    (gpu,) = facts.health.gpus
    assert gpu.lost and gpu.index == 7 and "GPU is lost" in gpu.errors[0]
    assert "GPU is lost" in facts.gpus[7].error and facts.gpus[6].error == ""  # the siblings still read


def test_visible_devices_by_index_and_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = opened("healthy_h100x8", monkeypatch)
    assert visible_indices(nvml, None) == (list(range(8)), "")
    assert visible_indices(nvml, "5,2") == ([5, 2], "")
    assert visible_indices(nvml, "3,9,1") == ([3], "")  # CUDA stops at the first invalid ordinal
    assert visible_indices(nvml, "GPU-5a1e0000-0000-4000-8000-000000000006") == ([6], "")
    chosen, note = visible_indices(nvml, "GPU-5a1e")  # a prefix all eight share
    assert chosen == [] and "names no single GPU" in note


def test_binding_rule_matches_the_probes() -> None:
    assert bind([4], 3, 8) == (4, "the one visible GPU")
    assert bind(list(range(8)), 3, 8)[0] == 3
    assert bind([0, 1], 3, 8)[0] is None and "neither one per task" in bind([0, 1], 3, 8)[1]
    assert bind([], 0, 1) == (None, "no GPU visible")


def test_reads_stop_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = opened("healthy_h100x8", monkeypatch, deadline_s=-1)  # already past
    gpu = read_health(nvml, 0)
    assert gpu.errors and "deadline" in gpu.errors[0] and gpu.pci_bus_id == ""


def test_replay_file_that_cannot_be_read_is_nvml_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(tmp_path / "bad.json"))
    nvml, why = nvml_source.open_nvml(5)
    assert nvml is None and "bad.json" in why


def test_real_nvml_without_a_driver_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this machine, the real boundary: no NVIDIA driver here, so NVML says why (never raises)."""
    facts = gathered(monkeypatch, None)
    if facts.health.nvml == "ok":
        pytest.skip("this machine has an NVIDIA driver: the unavailable path cannot be seen here")
    assert facts.health.nvml.startswith("unavailable: ") and len(facts.health.nvml) > len("unavailable: ")
    assert facts.health.gpus == [] and facts.health.bound_index is None


def test_xid_watch_opens_with_the_facts_and_drains_later(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "xid_events", "3")
    assert facts.health.xid_watch == "watching"
    watch = take_xid_watch(facts.rank)
    assert watch is not None and take_xid_watch(facts.rank) is None  # handed over once
    assert watch.drain() == [74, 74, 48] and watch.drain() == []
    watch.close()
    quiet = gathered(monkeypatch, "xid_events", "2")
    watch = take_xid_watch(quiet.rank)
    assert watch is not None and watch.drain() == []
    watch.close()


def test_xid_registration_not_supported_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "not_supported")
    assert facts.health.xid_watch == "" and "xid_events" in facts.health.gpus[0].unavailable
    assert take_xid_watch(facts.rank) is None


def test_a_run_never_takes_an_earlier_runs_watch_it_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ended before its recheck leaves its watch; the next run of the same rank in the
    process (preflight.check called again) closes it, whether or not its own registration works."""
    gathered(monkeypatch, "xid_events", "3")  # never taken
    facts = gathered(monkeypatch, "not_supported")
    assert facts.health.xid_watch == "" and take_xid_watch(facts.rank) is None


@pytest.mark.gpu
def test_real_gpu_health_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine (`pytest -m gpu`): the real driver through the same boundary, every read
    classified, the XID watch registered; a healthy GPU gives no GPU finding but GPU012's idle info."""
    from tests.checks.test_gpu_health import gpu_findings

    facts = gathered(monkeypatch, None, visible="0")
    assert facts.health.nvml == "ok", facts.health.nvml
    (gpu,) = facts.health.gpus
    assert gpu.errors == [] and not gpu.lost and gpu.pci_bus_id
    assert gpu.ecc_uncorrected_volatile is not None and gpu.pcie_max_width and gpu.temperature_c is not None
    # the fabric info through nvmlDeviceGetGpuFabricInfoV and nvidia-ml-py's structures: a value, or
    # NotSupported (before Hopper) listed as a fact; never an error (a wrong version field would be one)
    assert gpu.fabric is not None or "fabric_info" in gpu.unavailable
    assert facts.health.xid_watch == "watching"
    watch = take_xid_watch(facts.rank)
    assert watch is not None and watch.drain() == []
    watch.close()
    assert set(gpu_findings([facts], backend="nccl")) <= {"GPU012", "GPU015"}, gpu_findings([facts])
