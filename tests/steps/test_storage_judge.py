"""Rank 0's judgement of the storage family (steps/storage_judge.py), from what ranks would send."""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.lib.mountinfo import mount_of, parse_line, slow_options
from preflight.lib.storage_options import StorageOptions
from preflight.model.storage import MountView, StoragePlan, StorageRead, StorageVisit, StorageWrote
from preflight.steps.storage_judge import Judge

NFS = MountView("/ckpt", "nfs4", "filer:/ckpt", "/", ["rw", "vers=4.2"])
LOCAL = MountView("/ckpt", "ext4", "/dev/nvme0n1p1", "/", ["rw"])
HOSTS = {0: "n1", 1: "n1", 2: "n2", 3: "n2", 4: "n3", 5: "n3"}


def _judge(tmp_path: Path, visits: dict[int, StorageVisit] | None = None, **options) -> Judge:
    plan = StoragePlan(".preflight-storage-x", "x", 2**20)
    visits = visits or {r: StorageVisit(r, h, True, mount=NFS, free_bytes=2**40, free_inodes=10**6)
                        for r, h in HOSTS.items()}
    return Judge(StorageOptions(str(tmp_path), **options), plan, HOSTS, visits)


def _pass(judge: Judge, index: int, seconds: dict[str, float], read_seconds: dict[str, float] | None = None,
          writers: list[int] | None = None) -> list[int]:
    writers = writers if writers is not None else judge.first_writers()
    wrote = {r: StorageWrote(r, f"/ckpt/r{r}.p{index}", 2**20, seconds[HOSTS[r]], digest=f"d{r}") for r in writers}
    pairs = judge.pairs(index, wrote)
    read = {reader: StorageRead(reader, writer, 2**20, (read_seconds or seconds)[HOSTS[reader]], digest=f"d{writer}")
            for reader, writer in pairs}
    return judge.add_pass(index, wrote, read)


def test_each_rank_reads_a_file_written_on_another_host(tmp_path: Path) -> None:
    judge = _judge(tmp_path)
    wrote = {r: StorageWrote(r, "", 1, 1.0, "d") for r in HOSTS}
    pairs = judge.pairs(0, wrote)
    assert sorted(reader for reader, _ in pairs) == sorted(HOSTS)
    assert all(HOSTS[reader] != HOSTS[writer] for reader, writer in pairs)
    one_host = Judge(StorageOptions(str(tmp_path)), StoragePlan("d", "x", 1), {0: "a", 1: "a"}, {})
    assert one_host.pairs(0, {0: StorageWrote(0, "", 1, 1.0, "d"), 1: StorageWrote(1, "", 1, 1.0, "d")}) == [
        (0, 1), (1, 0)]


def _alone(judge: Judge, first: list[int], times: list[dict[str, float]]) -> list[int]:
    """Run the passes alone that follow pass 0 with these times each; the writers rank 0 asks for next."""
    writers = first
    for index, seconds in enumerate(times, start=1):
        assert writers, "rank 0 stopped before these passes"
        assert {HOSTS[r] for r in writers} == set(seconds)  # one host alone per pass
        writers = _pass(judge, index, seconds, writers=writers)
    return writers


def test_a_slow_host_is_named_only_when_measured_alone_it_is_slow_again(tmp_path: Path) -> None:
    judge = _judge(tmp_path)
    first = _pass(judge, 0, {"n1": 0.01, "n2": 0.01, "n3": 0.1})
    assert [HOSTS[r] for r in first] == ["n1", "n1"]  # the known-good host alone first
    # reference, suspect, reference, suspect: each measured alone twice, interleaved
    assert _alone(judge, first, [{"n1": 0.01}, {"n3": 0.1}, {"n1": 0.02}, {"n3": 0.09}]) == []
    found = judge.findings()
    assert {(f.check_id, tuple(f.hosts), f.data["figure"]) for f in found} == {
        ("STO007", ("n3",), "write"), ("STO007", ("n3",), "read")}
    assert judge.passes == 5 and found[0].data["passes"][1] == pytest.approx(2**21 / 0.09 / 1e9)  # its best alone

    cleared = _judge(tmp_path)
    first = _pass(cleared, 0, {"n1": 0.01, "n2": 0.01, "n3": 0.1})
    _alone(cleared, first, [{"n1": 0.01}, {"n3": 0.1}, {"n1": 0.01}, {"n3": 0.012}])  # once as fast alone: noise
    assert cleared.findings() == []
    section = cleared.section(1.0)
    assert [h.write_again_gbps is not None for h in section.hosts] == [True, False, True]
    # pass 0 (every rank) read across hosts; the passes alone read the host's own files: said apart
    assert section.read_back == "unknown; each rank read a file another host wrote; a host measured again alone " \
        "read its own files"


def test_a_checksum_mismatch_names_the_path_and_the_writers_host(tmp_path: Path) -> None:
    judge = _judge(tmp_path)
    wrote = {r: StorageWrote(r, f"/ckpt/r{r}.p0", 2**20, 0.01, digest=f"d{r}") for r in HOSTS}
    read = {reader: StorageRead(reader, writer, 2**20, 0.01, digest="bad" if writer == 4 else f"d{writer}")
            for reader, writer in judge.pairs(0, wrote)}
    assert judge.add_pass(0, wrote, read) == []
    [finding] = judge.findings()
    assert finding.check_id == "STO006" and finding.hosts == ["n3"] and "/ckpt/r4.p0" in finding.message


def test_a_host_that_does_not_see_the_file_is_named_with_its_mount_beside_the_others(tmp_path: Path) -> None:
    visits = {r: StorageVisit(r, h, h != "n2", seen="" if h != "n2" else "no such file", mount=NFS if h != "n2"
                              else LOCAL, free_bytes=2**40, free_inodes=10**6) for r, h in HOSTS.items()}
    found = _judge(tmp_path, visits).findings()
    [finding] = found
    assert finding.check_id == "STO001" and finding.hosts == ["n2"] and finding.ranks == [2, 3]
    assert "ext4 /dev/nvme0n1p1 at /ckpt" in finding.message and "nfs4 filer:/ckpt at /ckpt" in finding.message


@pytest.mark.parametrize(("free", "severity"), [(2**30, "error"), (3 * 2**30, "warn"), (5 * 2**30, None)])
def test_room_for_two_checkpoints(tmp_path: Path, free: int, severity: str | None) -> None:
    visits = {r: StorageVisit(r, h, True, mount=NFS, free_bytes=free if r == 3 else 2**40, free_inodes=10**6)
              for r, h in HOSTS.items()}
    found = _judge(tmp_path, visits, checkpoint_size=2 * 2**30).findings()
    assert [(f.check_id, f.severity.value) for f in found] == ([("STO004", severity)] if severity else [])


def test_mounts_that_differ_and_options_that_slow_every_save(tmp_path: Path) -> None:
    sync = MountView("/ckpt", "nfs4", "filer:/ckpt", "/", ["noac", "rw", "sync", "vers=4.2"])
    visits = {r: StorageVisit(r, h, True, mount=sync if h == "n3" else NFS, free_bytes=2**40, free_inodes=10**6)
              for r, h in HOSTS.items()}
    found = {f.check_id: f for f in _judge(tmp_path, visits).findings()}
    assert set(found) == {"STO002", "STO003"}
    assert found["STO003"].hosts == ["n3"] and "noac, sync" in found["STO003"].message


def test_mountinfo_names_the_mount_holding_a_path_and_its_bind_root() -> None:
    text = ("22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
            "40 22 0:45 / /ckpt rw,noatime - nfs4 filer:/export\\040x rw,vers=4.2,sync\n"
            "41 22 254:0 /tmp/private /ckpt/sub rw - ext4 /dev/vda rw\n")
    assert mount_of("/ckpt/run", text).where() == "nfs4 filer:/export x at /ckpt"
    assert mount_of("/ckpt/sub/x", text).where() == "ext4 /dev/vda[/tmp/private] at /ckpt/sub"
    assert mount_of("/home", text).mount_point == "/"
    assert slow_options(mount_of("/ckpt", text)) == ["sync"]
    assert parse_line("garbage") is None and parse_line("1 2 3 4 5 6 7") is None


def test_below_the_expected_rate_is_an_error_naming_each_host(tmp_path: Path) -> None:
    judge = _judge(tmp_path, expect_write=1.0, expect_read=0.05)
    _pass(judge, 0, {"n1": 0.01, "n2": 0.01, "n3": 0.01})  # 2 MiB per host in 10 ms: 0.21 GB/s
    found = judge.findings()
    assert {(f.check_id, f.hosts[0], f.data["figure"]) for f in found} == {
        ("STO008", host, "write") for host in ("n1", "n2", "n3")}
    assert all(f.severity.value == "error" and f.blames_host for f in found)


def test_a_gap_of_milliseconds_alone_is_noise_not_a_slow_host(tmp_path: Path) -> None:
    """3x slower alone twice, but 2 MiB in 6 ms against 2 ms: within a loaded host's scheduling noise."""
    judge = _judge(tmp_path)
    first = _pass(judge, 0, {"n1": 0.002, "n2": 0.002, "n3": 0.006})
    _alone(judge, first, [{"n1": 0.002}, {"n3": 0.006}, {"n1": 0.002}, {"n3": 0.006}])
    assert judge.findings() == []
