"""probes/nccl_capture.py with the fake NCCL (tests/helpers/fake_nccl.NcclProcess) as the process's NCCL:
the debug file set before the first communicator, the job's own file honoured, its stdout kept."""

from __future__ import annotations

import io
import os

import pytest

from preflight.probes import nccl_capture
from tests.helpers.fake_nccl import Comm, NcclHost, NcclProcess

HOSTS = ["h1", "h1", "h2", "h2"]


def form(env: dict[str, str], process: NcclProcess | None = None, rank: int = 1) -> NcclProcess:
    process = process or NcclProcess(NcclHost("h1"), pid=os.getpid())
    process.communicator(Comm(rank, HOSTS, device=rank % 2), env)
    return process


def test_capture_sets_the_file_before_the_first_communicator_and_restores_after():
    env = {"NCCL_DEBUG_SUBSYS": "COLL"}
    capture = nccl_capture.start(env)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "COLL,INIT,NET,GRAPH,ENV"
    form(env)
    account, why = nccl_capture.read(capture, "h1")
    assert why == "" and account is not None
    assert (account.rank, account.network, account.gdr, account.source) == (1, "IB", True, "captured")
    assert [n.gdr for n in account.nics] == [True]  # the NET subsystem's HCA line was captured
    folder = capture.folder
    nccl_capture.close(capture, env)
    assert env == {"NCCL_DEBUG_SUBSYS": "COLL"} and not os.path.exists(folder)


def test_the_jobs_own_debug_file_is_honoured_and_read(tmp_path):
    env = {"NCCL_DEBUG_FILE": str(tmp_path / "mine.%h.%p.log"), "NCCL_DEBUG": "WARN"}
    capture = nccl_capture.start(env)
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "mine.%h.%p.log") and env["NCCL_DEBUG"] == "INFO"
    form(env)
    account, _ = nccl_capture.read(capture, "h1")
    assert account is not None and account.source == "NCCL_DEBUG_FILE"
    assert capture.path() == str(tmp_path / f"mine.h1.{os.getpid()}.log")  # the name NCCL gave it
    nccl_capture.close(capture, env)
    assert env["NCCL_DEBUG"] == "WARN" and (tmp_path / os.path.basename(capture.path())).exists()


def test_nccl_reads_its_settings_once_a_file_set_after_the_first_communicator_is_not_written(tmp_path):
    process = form({})  # a communicator before preflight: NCCL_DEBUG unset, NCCL fixed its logging
    env: dict[str, str] = {}
    capture = nccl_capture.start(env)
    form(env, process, rank=0)
    account, why = nccl_capture.read(capture, "h1")
    assert account is None and "NCCL wrote no log" in why
    nccl_capture.close(capture, env)


@pytest.mark.parametrize("level, expect", [
    ("", []),
    ("VERSION", ["NCCL version 2.26.2+cuda12.4"]),
    ("WARN", ["NCCL version 2.26.2+cuda12.4", "misc/socket.cc:484 NCCL WARN Net : connect failed"]),
])
def test_the_jobs_own_nccl_debug_is_relayed_as_nccl_would_print_it(level, expect):
    env = {"NCCL_DEBUG": level} if level else {}
    capture = nccl_capture.start(env)
    host = NcclHost("h1", warnings=[("misc/socket.cc", 484, "", "Net : connect failed")])
    form(env, NcclProcess(host, pid=os.getpid()))
    out = io.StringIO()
    nccl_capture.relay(capture, out)
    printed = [line.split("] ", 2)[-1] if " NCCL WARN " in line else line for line in out.getvalue().splitlines()]
    assert [p.split("] ", 1)[-1] for p in printed] == expect
    nccl_capture.close(capture, env)


def test_info_is_relayed_whole():
    env = {"NCCL_DEBUG": "INFO"}
    capture = nccl_capture.start(env)
    form(env)
    out = io.StringIO()
    assert nccl_capture.relay(capture, out) > 5 and " NCCL INFO Using network IB" in out.getvalue()
    nccl_capture.close(capture, env)


def test_in_process_reads_the_trainers_file_else_says_which_variables(tmp_path):
    assert "NCCL_DEBUG=INFO and NCCL_DEBUG_FILE" in nccl_capture.existing({}).unavailable
    assert "not INFO" in nccl_capture.existing({"NCCL_DEBUG_FILE": "/x"}).unavailable
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "t.%p.log"), "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    form(env)
    capture = nccl_capture.existing(env)
    account, _ = nccl_capture.read(capture)
    assert account is not None and account.network == "IB" and account.source == "NCCL_DEBUG_FILE"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"  # nothing was changed in the trainer's process
