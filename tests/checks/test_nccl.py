"""NCCL / torch.distributed settings, sockets, transports, CUDA injection, OMP and limits."""

from __future__ import annotations

import pytest

from tests.helpers.facts import rank_facts, run

IFACES = {"interfaces": [{"name": n, "up": True, "mtu": 1500, "addresses": []} for n in ("lo", "eth0", "ib0", "ib1")]}


def facts(env: dict[str, str], **kwargs: object):
    """Rank 3 on node07 with this environment."""
    return rank_facts(3, "node07", env=env, world_size=8, local_world_size=4, **kwargs)


@pytest.mark.parametrize(("check_id", "env", "fires"), [
    ("NCCL001", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, True),
    ("NCCL001", {"NCCL_ASYNC_ERROR_HANDLING": "0"}, True),  # legacy name counts when the new one is unset
    ("NCCL001", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "NCCL_ASYNC_ERROR_HANDLING": "0"}, False),
    ("NCCL001", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, False),
    ("NCCL002", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "4"}, True),
    ("NCCL002", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "yes"}, True),
    ("NCCL002", {"NCCL_ASYNC_ERROR_HANDLING": "-1"}, True),
    ("NCCL002", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}, False),
    ("NCCL003", {"NCCL_ASYNC_ERROR_HANDLING": "1"}, True),
    ("NCCL003", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, False),
    ("NCCL004", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_ASYNC_ERROR_HANDLING": "1"}, True),
    ("NCCL004", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_ASYNC_ERROR_HANDLING": "1"}, False),
    ("NCCL005", {"TORCH_NCCL_BLOCKING_WAIT": "1"}, True),
    ("NCCL005", {"TORCH_NCCL_BLOCKING_WAIT": "0"}, False),
    ("NCCL006", {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}, True),
    ("NCCL006", {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_BUFFER_SIZE": "0"}, True),
    ("NCCL006", {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_BUFFER_SIZE": "2000"}, False),
    ("NCCL006", {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, False),
    ("NCCL012", {"NCCL_P2P_DISABLE": "1"}, True),
    ("NCCL012", {"NCCL_SHM_DISABLE": "1"}, True),
    ("NCCL012", {"NCCL_P2P_DISABLE": "0"}, False),
    ("NCCL013", {"NCCL_NET_GDR_LEVEL": "PHB"}, False),
    ("NCCL013", {"NCCL_NET_GDR_LEVEL": "sys"}, False),
    ("NCCL013", {"NCCL_NET_GDR_LEVEL": "2"}, False),
    ("NCCL013", {"NCCL_NET_GDR_LEVEL": "NVL"}, True),
    ("NCCL013", {"NCCL_IB_GDR_LEVEL": "9"}, True),
    ("ENV006", {"CUDA_INJECTION64_PATH": "/x.so"}, True),
    ("ENV006", {"CUDA_ENABLE_COREDUMP_ON_EXCEPTION": "1", "COMPUTE_PROFILE": "1"}, True),
    ("ENV006", {"CUDA_LAUNCH_BLOCKING": "0"}, False),
    ("ENV007", {}, True),
    ("ENV007", {"OMP_NUM_THREADS": "4"}, False),
])
def test_env_settings(check_id: str, env: dict[str, str], fires: bool) -> None:
    found = run(check_id, facts(env))
    assert bool(found) == fires, found
    for finding in found:
        assert finding.ranks == [3] and finding.hosts == ["node07"]


def test_omp_only_matters_with_several_local_ranks() -> None:
    assert run("ENV007", rank_facts(0, env={}, local_world_size=1)) == []


def test_nccl_debug_only_where_nccl_is_in_play() -> None:
    assert run("NCCL007", facts({})) == []  # a CPU-only torch, gloo
    assert len(run("NCCL007", facts({}, versions={"nccl_built": "yes"}))) == 1
    assert len(run("NCCL007", facts({}), backend="nccl")) == 1
    assert run("NCCL007", facts({"NCCL_DEBUG": "WARN"}), backend="nccl") == []


@pytest.mark.parametrize(("env", "ids"), [
    ({"NCCL_SOCKET_IFNAME": "ib"}, set()),
    ({"NCCL_SOCKET_IFNAME": "^lo,docker"}, set()),
    ({"NCCL_SOCKET_IFNAME": "=ib"}, {"NCCL008"}),
    ({"NCCL_SOCKET_IFNAME": "ib0,,ib1"}, {"NCCL008"}),
    ({"NCCL_SOCKET_IFNAME": "^lo,eth,ib"}, {"NCCL008"}),
    ({"GLOO_SOCKET_IFNAME": "ib"}, {"NCCL009"}),  # gloo names are exact
    ({"GLOO_SOCKET_IFNAME": "ib0,ib1"}, set()),
    ({"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": "ib0,ib1"}, set()),
    ({"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": "eth0"}, {"NCCL010"}),
    ({"NCCL_SOCKET_IFNAME": "nosuch", "GLOO_SOCKET_IFNAME": "eth0"}, {"NCCL008"}),
])
def test_socket_ifnames(env: dict[str, str], ids: set[str]) -> None:
    found = {f.check_id for i in ("NCCL008", "NCCL009", "NCCL010") for f in run(i, facts(env, network=IFACES))}
    assert found == ids


def test_socket_ifname_without_interface_facts_is_not_judged() -> None:
    assert run("NCCL008", facts({"NCCL_SOCKET_IFNAME": "nosuch"})) == []


def test_ib_disable_only_matters_with_ib_devices() -> None:
    env = {"NCCL_IB_DISABLE": "1"}
    assert run("NCCL011", facts(env)) == []  # no RDMA ports found: none
    assert run("NCCL011", facts(env, network={"ib_ports": []})) == []
    ports = [{"device": "mlx5_0", "port": 1}, {"device": "mlx5_1", "port": 1}]
    [finding] = run("NCCL011", facts(env, network={"ib_ports": ports}))
    assert "2 RDMA device(s) (mlx5_0, mlx5_1)" in finding.message
    assert run("NCCL011", facts({"NCCL_IB_DISABLE": "0"}, network={"ib_ports": ports[:1]})) == []


@pytest.mark.parametrize(("memlock", "ib", "fires"), [
    (8 << 20, True, True), (-1, True, False), (64 << 30, True, False), (8 << 20, False, False), (None, True, False),
])
def test_memlock(memlock: int | None, ib: bool, fires: bool) -> None:
    ports = [{"device": "mlx5_0", "port": 1}] if ib else []
    subject = facts({}, system={"memlock_bytes": memlock}, network={"ib_ports": ports})
    assert bool(run("SYS001", subject)) == fires


@pytest.mark.parametrize(("shm", "fires"), [(64 << 20, True), (2 << 30, False), (None, False)])
def test_shm(shm: int | None, fires: bool) -> None:
    found = run("SYS002", facts({}, system={"shm_bytes": shm}))
    assert bool(found) == fires
    if fires:
        assert found[0].message == "/dev/shm is 64 MiB (want >= 1.0 GiB)"


def test_async_error_handling_texts_say_which_mode_keeps_the_process() -> None:
    from preflight.registry import get_check

    for check_id in ("NCCL001", "NCCL002"):
        spec = get_check(check_id)
        text = " ".join((spec.hint, spec.func.__doc__ or "")).replace("\n", " ")
        assert "keep the process (default)" not in text and "keep the process) is" not in text
        assert "2" in spec.hint and "keep" in spec.hint and "kills the process" in spec.hint
