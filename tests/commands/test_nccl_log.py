"""`preflight nccl-log`: multi-rank logs of the releases, several files or one interleaved file; exit codes."""

from __future__ import annotations

import json

import pytest

from preflight.commands.cli import main
from tests.helpers.fake_nccl import RELEASES, Comm, DebugSettings, NcclHost, write_log

HOSTS = ["a"] * 4 + ["b"] * 4 + ["c"] * 4


def write_job(folder, release="v2.26.2-1", host_of=lambda name: NcclHost(name), env_of=lambda name: {},
              one_file=False):
    """Each rank's log as NCCL writes it, one file per rank or all of them appended into one."""
    paths = []
    for rank, name in enumerate(HOSTS):
        host = host_of(name)
        host.release = release
        path = folder / ("job.log" if one_file else f"rank{rank}.log")
        with path.open("a", encoding="utf-8") as out:
            write_log(host, Comm(rank, HOSTS, device=rank % 4), env_of(name),
                      DebugSettings("INFO", {"INIT", "NET", "GRAPH", "ENV"}, out), 500 + rank, 500 + rank)
        if path not in paths:
            paths.append(path)
    return [str(p) for p in paths]


def run_json(paths, capsys):
    code = main(["nccl-log", "--json", *paths])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("release", RELEASES)
def test_healthy_job_every_release(tmp_path, capsys, release):
    code, doc = run_json(write_job(tmp_path, release), capsys)
    assert code == 0 and doc["findings"] == []
    assert [r["rank"] for r in doc["ranks"]] == list(range(12))
    for host in doc["hosts"]:
        assert (host["network"], host["gdr"], host["nccl_version"]) == ("IB", True, release[1:].split("-")[0])
        assert host["intra_host"] == ["P2P/CUMEM"] and host["inter_host"] == ["NET/IB/GDRDMA"]
    assert all(r["warnings"] == [] and r["gdr"] is True for r in doc["ranks"])


@pytest.mark.parametrize("one_file", [False, True])
def test_socket_on_one_host_is_an_error_naming_it_and_ncclS_reason(tmp_path, capsys, one_file):
    paths = write_job(tmp_path, env_of=lambda name: {"NCCL_IB_HCA": "mlx5_9"} if name == "b" else {},
                      one_file=one_file)
    code, doc = run_json(paths, capsys)
    assert code == 3
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts["b"]["network"] == "Socket" and hosts["b"]["gdr"] is False and hosts["a"]["network"] == "IB"
    socket = [f for f in doc["findings"] if f["check_id"] == "NCCL020"]
    assert len(socket) == 1 and socket[0]["hosts"] == ["b"] and socket[0]["ranks"] == [4, 5, 6, 7]
    assert "NCCL_IB_HCA=mlx5_9 matched no device" in socket[0]["message"] and "eth0" in socket[0]["message"]


def test_gdr_off_on_one_host_is_an_error_with_the_reason(tmp_path, capsys):
    paths = write_job(tmp_path, host_of=lambda name: NcclHost(name, gdr=name != "c", dmabuf=name != "c"))
    code, doc = run_json(paths, capsys)
    assert code == 3
    gdr = [f for f in doc["findings"] if f["check_id"] == "NCCL021"]
    assert [f["hosts"] for f in gdr] == [["c"]] and "nvidia-peermem not loaded" in gdr[0]["message"]
    assert {h["host"]: h["gdr"] for h in doc["hosts"]} == {"a": True, "b": True, "c": False}


def test_shm_where_others_use_p2p_is_a_warning(tmp_path, capsys):
    paths = write_job(tmp_path, env_of=lambda name: {"NCCL_P2P_DISABLE": "1"} if name == "a" else {})
    code, doc = run_json(paths, capsys)
    assert code == 0
    assert [(f["check_id"], f["severity"], f["hosts"]) for f in doc["findings"]] == [("NCCL022", "warn", ["a"])]


def test_versions_that_disagree(tmp_path, capsys):
    (tmp_path / "old").mkdir()
    paths = write_job(tmp_path)[:8] + write_job(tmp_path / "old", release="v2.21.5-1")[8:]
    code, doc = run_json(paths, capsys)
    assert code == 3
    (finding,) = [f for f in doc["findings"] if f["check_id"] == "NCCL024"]
    assert finding["hosts"] == ["c"] and "2.21.5" in finding["message"]


def test_text_output_per_host(tmp_path, capsys):
    code = main(["nccl-log", *write_job(tmp_path, host_of=lambda name: NcclHost(name, gdr=name != "b"))])
    out = capsys.readouterr().out
    assert code == 3
    assert "b: ranks 4-7  NCCL 2.26.2  network IB  GDR OFF" in out and "ERROR NCCL021: host b" in out


@pytest.mark.parametrize("content", [b"", b"hello\nworld\n", bytes(range(256)) * 64])
def test_unreadable_input_is_one_line_exit_2(tmp_path, capsys, content):
    path = tmp_path / "x.log"
    path.write_bytes(content)
    assert main(["nccl-log", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no NCCL log line" in err


def test_missing_file_and_folder_exit_2(tmp_path, capsys):
    assert main(["nccl-log", str(tmp_path / "nope.log")]) == 2
    assert main(["nccl-log", str(tmp_path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_real_nccl_2_28_job_log_is_one_host_on_sockets_with_the_reason(capsys):
    """The two files NCCL 2.28.9 wrote on an H200 (tests/fixtures/nccl_log/real_h200_2.28.9), as a user reads them."""
    from pathlib import Path

    folder = Path(__file__).parents[1] / "fixtures" / "nccl_log" / "real_h200_2.28.9"
    paths = sorted(str(p) for p in folder.glob("nccl.*.log"))
    assert main(["nccl-log", *paths]) == 0
    text = capsys.readouterr().out
    assert "vm: ranks 0-1  NCCL 2.28.9  network Socket  GDR OFF" in text and "NICs lo" in text
    assert "why: NET/IB : No device found." in text and "no findings" in text
