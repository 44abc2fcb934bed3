"""preflight.check's probes on the trainer's own NCCL groups (in-process): NCCL fixed its logging at the
trainer's first communicator, so the account is the trainer's NCCL_DEBUG_FILE, or unavailable (NCCL025).

The trainer's communicator is formed through the fake CUDA's NCCL (tests/helpers/fake_cuda.py), whose
NCCL (tests/helpers/fake_nccl.py) reads the trainer's debug variables once, as NCCL does."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist

from preflight import api
from preflight.channel.liveness import RankLiveness
from preflight.model import Severity, World
from preflight.options import RunOptions
from preflight.probes import orchestrate
from preflight.steps import nccl_account
from tests.helpers.fake_cuda import FakeCuda, gpu
from tests.helpers.fake_nccl import NcclHost, NcclProcess
from tests.helpers.ranks import free_port


def probe_in_process(monkeypatch: pytest.MonkeyPatch, trainer_env: dict[str, str]):
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in trainer_env.items():
        monkeypatch.setenv(name, value)
    # Little free memory and slow rates, as test_real_node's: with 80 GiB free the device family sized its
    # operands for an H100 (8192^2 products) and ran them on this CPU until its 32 s bound gave up (DEV009).
    model = FakeCuda([gpu(i, free=320 * 2**20) for i in range(2)], rates={"gemm": 0.002, "copy": 2.0, "host": 1.0})
    model.nccl_log = NcclProcess(NcclHost(socket.gethostname(), gdr=False))
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False)
    world = World(launcher="env", rank=0, world_size=1, host="trainer-host", master_addr="127.0.0.1",
                  master_port=port)
    options = RunOptions.build(ops="all_reduce", sizes="64KiB", warmup=1, iters=2, probe_timeout_s=30.0,
                               only=["probe"]).for_world(1)
    with model.install():
        model.set_device(1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 1))
        try:
            job = api._job_groups(None, [], "nccl", "cuda", 0, 1)
            outcome = orchestrate.run_probes(world, options, store, job, alive=RankLiveness(1, 0, store))
        finally:
            dist.destroy_process_group()
    # The device family ran to its end on the fake (an abandoned one burns this process's CPU after the test).
    assert [row.errors for row in outcome.device_rows] == [{}]
    return outcome


def test_without_the_trainers_debug_file_the_account_is_unavailable_in_one_info_line(monkeypatch):
    outcome = probe_in_process(monkeypatch, {"NCCL_DEBUG": "WARN"})
    assert outcome.nccl_accounts == {} and list(outcome.nccl_missing) == [0]
    (finding,) = nccl_account.judge(outcome, [])
    assert finding.check_id == "NCCL025" and finding.severity == Severity.INFO
    assert "NCCL_DEBUG=INFO and NCCL_DEBUG_FILE" in finding.message
    assert os.environ["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_FILE" not in os.environ  # the trainer's, untouched


def test_the_trainers_own_debug_file_is_read(monkeypatch, tmp_path):
    outcome = probe_in_process(monkeypatch, {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "n.%h.%p")})
    account = outcome.nccl_accounts[0]
    assert (account.source, account.network, outcome.nccl_hosts[0]) == ("NCCL_DEBUG_FILE", "IB", "trainer-host")
    assert outcome.nccl is not None and outcome.nccl.ranks_read == 1 and outcome.nccl_missing == {}
    assert outcome.nccl.profiles[0].hosts == ["trainer-host"]
