"""lib/nccl_log.py: NCCL's logs of four releases (written by the fake from NCCL's own format strings) read
into accounts; interleaved ranks, launcher prefixes, garbage, binary, overlong lines and a 1 GB file bounded."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from preflight.lib.nccl_log import MAX_READ_BYTES, network_reason, parse_lines, read_log_file
from preflight.model.nccl_account import MAX_WARNINGS
from tests.helpers.fake_nccl import RELEASES, Comm, DebugSettings, NcclHost, write_log

SUBSYS = {"INIT", "NET", "GRAPH", "ENV"}
TWO_HOSTS = ["a"] * 4 + ["b"] * 4


def log_of(host: NcclHost, rank: int = 3, hosts: list[str] | None = None, env: dict[str, str] | None = None,
           subsys: set[str] = SUBSYS, pid: int = 4242) -> str:
    """One rank's NCCL log as NCCL writes it for this host."""
    out = io.StringIO()
    write_log(host, Comm(rank, hosts or TWO_HOSTS, device=rank % 4), env or {}, DebugSettings("INFO", subsys, out),
              pid, pid + 7)
    return out.getvalue()


def account_of(text: str):
    accounts = parse_lines(text.splitlines(keepends=True)).accounts
    assert len(accounts) == 1
    return accounts[0]


@pytest.mark.parametrize("release", RELEASES)
def test_ib_with_gdr_every_release(release):
    account = account_of(log_of(NcclHost("a", release=release)))
    assert account.nccl_version == release[1:].split("-")[0]
    assert (account.network, account.gdr, account.ib_found) == ("IB", True, True)
    assert account.rank == 3 and account.nranks == 8
    assert [(n.device, n.port, n.link_layer, n.gdr) for n in account.nics] == [("mlx5_0", 1, "IB", True)]  # its NIC
    assert account.network_transports() == ["NET/IB/GDRDMA"]
    assert account.unreadable == 0


@pytest.mark.parametrize("release", RELEASES)
def test_gdr_off_names_ncclS_reason(release):
    account = account_of(log_of(NcclHost("a", release=release, gdr=False, dmabuf=False)))
    assert account.gdr is False and account.network == "IB"
    assert account.network_transports() == ["NET/IB"]
    assert "GPU Direct RDMA Disabled for HCA 'mlx5_0'" in account.gdr_reason
    assert "nvidia-peermem" in account.gdr_reason and "no DMA-BUF" in account.gdr_reason


@pytest.mark.parametrize("release", ["v2.18.3-1", "v2.21.5-1", "v2.26.2-1"])
def test_gdr_off_by_pcie_distance(release):
    account = account_of(log_of(NcclHost("a", release=release, gdr_distance=(7, 3))))
    assert account.gdr is False
    assert account.gdr_reason == "GPU-NIC distance 7 > NCCL_NET_GDR_LEVEL 3"


def test_gdr_level_from_the_environment_is_the_reason():
    account = account_of(log_of(NcclHost("a"), env={"NCCL_NET_GDR_LEVEL": "loc"}))
    assert account.gdr is False and account.gdr_reason == "NCCL_NET_GDR_LEVEL=LOC set by environment"


@pytest.mark.parametrize("release", RELEASES)
def test_roce_link_layer_and_the_nic_each_rank_used(release):
    host = NcclHost("a", release=release, nics=[("mlx5_0", 1, "RoCE"), ("mlx5_1", 1, "RoCE")])
    account = account_of(log_of(host, rank=3))  # GPU 3: its channels go through NIC 1
    assert [(n.device, n.link_layer) for n in account.nics] == [("mlx5_1", "RoCE")]
    assert account.network_transports() == ["NET/IB/GDRDMA"] and "NET/IB/1/GDRDMA" in account.inter
    alone = account_of(log_of(host, rank=1, hosts=["a"] * 4))  # no network channel: every NIC NCCL listed
    assert [n.device for n in alone.nics] == ["mlx5_0", "mlx5_1"]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("env, nics, says", [
    ({"NCCL_IB_HCA": "mlx9"}, [("mlx5_0", 1, "IB")], "NCCL_IB_HCA=mlx9 matched no device"),
    ({}, [], "NET/IB : No device found."),
    ({"NCCL_IB_DISABLE": "1"}, [("mlx5_0", 1, "IB")], "NCCL_IB_DISABLE=1 set by environment"),
])
def test_socket_fallback_with_ncclS_reason(release, env, nics, says):
    account = account_of(log_of(NcclHost("a", release=release, nics=nics), env=env))
    assert account.network == "Socket" and account.gdr is False
    assert [n.device for n in account.nics] == ["eth0"]
    assert account.network_transports() == ["NET/Socket"]
    assert says in network_reason(account)


@pytest.mark.parametrize("release", RELEASES)
def test_plugin_loaded_and_its_network(release):
    account = account_of(log_of(NcclHost("a", release=release, plugin="Libfabric")))
    assert account.plugin.loaded and account.plugin.name == "Libfabric"
    assert account.network == "Libfabric" and account.network_transports() == ["NET/Libfabric/GDRDMA"]


@pytest.mark.parametrize("release", RELEASES)
def test_no_plugin_says_why(release):
    account = account_of(log_of(NcclHost("a", release=release)))
    why = account.plugin.why
    assert not account.plugin.loaded
    assert ("libnccl-net.so" in why) if release != "v2.18.3-1" else ("No plugin found" in why)


@pytest.mark.parametrize("release", RELEASES)
def test_intra_host_p2p_shm_and_nvls(release):
    p2p = account_of(log_of(NcclHost("a", release=release, nvls=True), rank=0))
    assert p2p.intra_transports() == ["NVLS", "P2P/CUMEM"] and p2p.nvls_available is True
    shm = account_of(log_of(NcclHost("a", release=release), rank=0, env={"NCCL_P2P_DISABLE": "1"}))
    assert shm.intra_transports() == ["SHM"] and shm.nvls_available is False


def test_default_subsystems_still_give_network_and_gdr_from_channels():
    account = account_of(log_of(NcclHost("a", release="v2.26.2-1"), subsys={"INIT", "BOOTSTRAP", "ENV"}))
    assert account.network == "IB" and account.gdr is True
    assert [n.gdr for n in account.nics] == [None]  # the HCA line is NET only: not said


def test_interleaved_ranks_of_one_file_are_told_apart_by_host_and_pid():
    lines = []
    for rank in range(8):
        host = NcclHost(TWO_HOSTS[rank], gdr=TWO_HOSTS[rank] == "a")
        lines += [(rank, i, line) for i, line in enumerate(log_of(host, rank=rank, pid=1000 + rank).splitlines(True))]
    random.Random(7).shuffle(lines)
    lines.sort(key=lambda item: item[1])  # each rank's lines in order, ranks interleaved
    read = parse_lines(["srun: job 12 step 0\n", *[f"{rank}: {line}" for rank, _, line in lines]])
    by_rank = {a.rank: a for a in read.accounts}
    assert sorted(by_rank) == list(range(8))
    assert {r: by_rank[r].gdr for r in by_rank} == {r: TWO_HOSTS[r] == "a" for r in range(8)}
    assert {by_rank[r].host for r in range(4, 8)} == {"b"}


def test_warnings_are_bounded_and_counted():
    host = NcclHost("a", release="v2.30.7-1", warnings=[("misc/socket.cc", 484, "ncclSocketConnect", f"retry {i}")
                                                        for i in range(50)])
    account = account_of(log_of(host))
    assert account.warnings_total == 50 and len(account.warnings) == MAX_WARNINGS
    assert account.warnings[0] == "misc/socket.cc:484 (ncclSocketConnect) retry 0"


def test_old_warn_shape_with_leading_blank_line():
    account = account_of(log_of(NcclHost("a", release="v2.18.3-1", warnings=[("init.cc", 9, "", "boom")])))
    assert account.warnings == ["init.cc:9 boom"]


def test_garbage_binary_and_broken_lines_are_counted_never_raised():
    read = parse_lines([b"\x00\xff\xfe binary\n", "random text\n", b"\xc3\x28 bad utf8\n", None,
                        "x NCCL INFO but no prefix\n", "host:12:13 [0] NCCL INFO Using network IB\n"])
    assert read.unreadable == 4 and read.nccl_lines == 1
    assert read.accounts[0].network == "IB"


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    read = read_log_file(str(path))
    assert read.lines == 0 and not read.is_nccl_log() and read.accounts == []


def test_overlong_line_is_one_unreadable_line(tmp_path):
    path = tmp_path / "long.log"
    path.write_bytes(b"h:1:1 [0] NCCL INFO " + b"x" * 100_000 + b"\nh:1:1 [0] NCCL INFO Using network IB\n")
    read = read_log_file(str(path))
    assert (read.lines, read.unreadable) == (2, 1) and read.accounts[0].network == "IB"


def test_one_gigabyte_log_is_read_only_to_the_bound(tmp_path):
    """A sparse 1 GB file (no 1 GB written): NCCL's lines at its top are read, the rest counted as not read."""
    path = tmp_path / "huge.log"
    head = log_of(NcclHost("a", gdr=False)).encode()
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(2**30)
    read = read_log_file(str(path))
    assert read.truncated_bytes == 2**30 - MAX_READ_BYTES
    assert read.accounts[0].network == "IB" and read.accounts[0].gdr is False
    assert read.unreadable >= 1  # the NULs of the hole: unreadable lines, never a crash


def test_fake_formats_cite_their_source_and_release():
    import json

    table = json.loads(Path("tests/fixtures/nccl_log/formats.json").read_text())
    assert sorted(table) == sorted(RELEASES)
    for release, kinds in table.items():
        for entry in kinds.values():
            assert entry["release"] == release and entry["source"].startswith("src/") and ":" in entry["source"]


def test_older_and_plugin_wordings_are_read_where_the_meaning_is_clear():
    """Shapes of NCCL 2.10-2.12 and of HPC-X's IBext plugin (docs: /work/shared/NCCL-LOG-FORMATS.md), a
    2.26 timestamp on an INFO line, srun --label and torchrun prefixes in front."""
    read = parse_lines([
        "NCCL version 2.10.3+cuda11.4\n",
        "0: n1:11:11 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n",
        "[rank0]: n1:11:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/RoCE ; OOB ib0:10.0.0.1<0>\n",
        "[2025-12-28 16:04:25] n1:11:11 [0] NCCL INFO Using network IBext_v8\n",
        "n1:11:11 [0] NCCL INFO Channel 00 : 0[1c000] -> 1[1d000] via P2P/IPC/read\n",
        "n1:11:11 [0] NCCL INFO Channel 01 : 0[1c000] -> 1[1d000] via direct shared memory\n",
        "n1:11:11 [0] NCCL INFO Channel 00/0 : 0[1c000] -> 8[1c000] [send] via NET/IBext_v8/0(1)/GDRDMA/Shared\n",
        "n1:11:11 [0] NCCL INFO Channel 01/0 : 8[1c000] -> 0[1c000] [receive] via NET/IBext_v8/1/GDRDMA\n",
    ])
    (account,) = read.accounts
    assert (account.nccl_version, account.network, account.gdr) == ("2.10.3", "IBext_v8", True)
    assert [(n.device, n.link_layer) for n in account.nics] == [("mlx5_0", "IB"), ("mlx5_1", "RoCE")]
    assert account.intra_transports() == ["P2P/IPC", "SHM"]
    assert account.network_transports() == ["NET/IBext_v8/GDRDMA"]
    assert read.unreadable == 0


def test_an_account_stays_small_whatever_the_log_holds():
    """Tens of thousands of distinct warnings, transports and NICs: the account that crosses the wire is bounded."""
    from preflight.model.codec import encode

    lines = ["h:1:1 [0] NCCL INFO NET/IB : Using" + "".join(f" [{i}]mlx5_{i}:1/IB" for i in range(500)) + " ; OOB x\n"]
    lines += [f"h:1:1 [0] misc/x.cc:{i} NCCL WARN failure number {i} " + "x" * 500 + "\n" for i in range(20_000)]
    lines += [f"h:1:1 [0] NCCL INFO Channel {i % 64:02d}/0 : 0[0] -> 1[1] via P2P/KIND{i}\n" for i in range(20_000)]
    (account,) = parse_lines(lines).accounts
    assert account.warnings_total == 20_000 and len(encode(account)) < 8_000


from hypothesis import given, settings  # noqa: E402 - the fuzz case below only
from hypothesis import strategies as st  # noqa: E402

NCCL_ISH = st.builds(lambda level, body: f"h:1:1 [0] NCCL {level} {body}\n", st.sampled_from(["INFO", "WARN"]),
                     st.text(max_size=300))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=300), st.text(max_size=300), NCCL_ISH, st.none()), max_size=40))
def test_any_lines_are_read_or_counted_never_raised(lines):
    read = parse_lines(lines)
    assert read.lines == len(lines) and read.unreadable <= len(lines)
    for account in read.accounts:
        assert len(account.warnings) <= MAX_WARNINGS


def test_a_real_nccl_2_28_logs_are_read_whole_into_their_account():
    """Two files NCCL 2.28.9 wrote on an H200 (tests/fixtures/nccl_log/real_h200_2.28.9): every line read,
    sockets on lo because no InfiniBand device was found, GPUDirect RDMA off for that reason, no plugin."""
    folder = Path(__file__).parents[1] / "fixtures" / "nccl_log" / "real_h200_2.28.9"
    reads = [read_log_file(str(folder / f"nccl.vm.{pid}.log")) for pid in (1292, 1291)]
    assert [(r.lines, r.unreadable) for r in reads] == [(91, 0), (88, 0)]
    accounts = [a for r in reads for a in r.accounts]
    assert [(a.rank, a.host, a.pid) for a in accounts] == [(0, "vm", 1292), (1, "vm", 1291)]
    for account in accounts:
        assert (account.nccl_version, account.cuda_version, account.network) == ("2.28.9", "13.0", "Socket")
        assert account.ib_found is False and account.gdr is False and account.nnodes == 2
        assert [n.device for n in account.nics] == ["lo"]
        assert set(account.inter) == {"NET/Socket/0", "NET/Socket/0/Shared"}
        assert not account.plugin.loaded and "libnccl-net.so" in account.plugin.why
        assert account.channels == 2 and not account.nvls_used
        assert "NET/IB : No device found." in network_reason(account)
