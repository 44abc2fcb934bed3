"""checks/nccl_account.py and steps/nccl_account.py: NCCL's accounts (from the fake NCCL's logs) judged
against the hosts' facts: RDMA ports, NVLink, NVSwitch, the GPU model."""

from __future__ import annotations

import copy
import io
from collections import Counter

import msgspec

from preflight.lib.nccl_log import parse_lines
from preflight.lib.nccl_summary import group_transport, summarize
from preflight.model import Finding, Severity
from preflight.model.nccl_account import NcclAccount
from preflight.model.probe_outcome import ProbeOutcome
from preflight.steps import nccl_account
from tests.helpers.facts import rank_facts
from tests.helpers.fake_nccl import Comm, DebugSettings, NcclHost, write_log

HOSTS = ["a", "a", "b", "b"]
PORTS = {"ib_ports": [{"device": "mlx5_0", "port": 1, "state": "ACTIVE", "link_layer": "InfiniBand"}]}


def accounts(host_of=lambda name: NcclHost(name), env_of=lambda name: {}) -> dict[int, NcclAccount]:
    out = {}
    for rank, name in enumerate(HOSTS):
        text = io.StringIO()
        write_log(host_of(name), Comm(rank, HOSTS, device=rank % 2), env_of(name),
                  DebugSettings("INFO", {"INIT", "NET", "ENV"}, text), 100 + rank, 100 + rank)
        (out[rank],) = parse_lines(text.getvalue().splitlines(True)).accounts
    return out


def facts(network=None, gpus=None):
    return [rank_facts(r, h, world_size=4, network=network or {}, gpus=gpus or []) for r, h in enumerate(HOSTS)]


def judged(accs, fact_list, strict=False, findings=None) -> list[Finding]:
    outcome = ProbeOutcome(backend="nccl", nccl_accounts=accs, findings=findings or [])
    return nccl_account.judge(outcome, fact_list, strict)


def ids(found):
    return sorted((f.check_id, f.severity.value, tuple(f.hosts)) for f in found)


def test_sockets_everywhere_is_an_error_only_where_the_facts_show_rdma_ports():
    socket_everywhere = accounts(env_of=lambda name: {"NCCL_IB_DISABLE": "1"})
    assert judged(socket_everywhere, facts()) == []  # no RDMA anywhere: sockets are all there is
    found = judged(socket_everywhere, facts(network=PORTS))
    assert ids(found) == [("NCCL020", "error", ("a",)), ("NCCL020", "error", ("b",))]
    assert "its active RDMA port(s) mlx5_0:1" in found[0].message and "NCCL_IB_DISABLE=1" in found[0].message


def test_gdr_off_everywhere_is_an_error_where_the_gpu_supports_it():
    off = accounts(host_of=lambda name: NcclHost(name, gdr=False))
    assert judged(off, facts()) == []  # nothing says GDR could be on
    h100 = [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]
    found = judged(off, facts(gpus=h100))
    assert ids(found) == [("NCCL021", "error", ("a",)), ("NCCL021", "error", ("b",))]
    assert "although its NVIDIA H100 80GB HBM3 and NICs support it" in found[0].message
    unloaded = [rank_facts(r, h, world_size=4, gpus=h100, health={"peermem": False}) for r, h in enumerate(HOSTS)]
    assert judged(off, unloaded)[0].message.endswith("; nvidia_peermem is not loaded there (sysfs)")


def test_shm_on_an_nvlink_host_warns_or_errs_with_strict_bandwidth():
    shm = accounts(env_of=lambda name: {"NCCL_P2P_DISABLE": "1"})
    nvlink = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "nvlink_active": 4}]
    assert judged(shm, facts()) == []
    assert ids(judged(shm, facts(gpus=nvlink))) == [("NCCL022", "warn", ("a",)), ("NCCL022", "warn", ("b",))]
    assert {f.severity for f in judged(shm, facts(gpus=nvlink), strict=True)} == {Severity.ERROR}


def test_nvls_expected_on_nvswitch_but_not_available():
    switch = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "nvlink_active": 18}]
    found = judged(accounts(), facts(gpus=switch))
    assert ids(found) == [("NCCL023", "warn", ("a",)), ("NCCL023", "warn", ("b",))]
    assert "NVLS multicast support is not available" in found[0].message
    assert judged(accounts(host_of=lambda name: NcclHost(name, nvls=True)), facts(gpus=switch)) == []


def test_account_unavailable_is_one_info_finding_not_a_pass():
    outcome = ProbeOutcome(backend="nccl", nccl_missing={0: "no file", 1: "no file"})
    (finding,) = nccl_account.judge(outcome, facts())
    assert (finding.check_id, finding.severity, finding.ranks) == ("NCCL025", Severity.INFO, [0, 1])
    assert nccl_account.judge(ProbeOutcome(backend="gloo", nccl_missing={0: "x"}), facts()) == []


def test_slow_group_findings_say_which_transport_carried_the_group():
    accs = accounts(env_of=lambda name: {"NCCL_IB_HCA": "mlx5_9"} if name == "b" else {})
    slow = [Finding("BW003", Severity.WARN, "all_reduce on dp group 0 slow", ranks=[1, 2], hosts=["a", "b"]),
            Finding("BW003", Severity.WARN, "all_reduce on tp group 0 slow", ranks=[0, 1], hosts=["a"]),
            Finding("NCCL011", Severity.WARN, "unrelated", ranks=[0])]
    judged(accs, facts(network=PORTS), findings=slow)
    assert slow[0].data["nccl_transport"] == "NET/IB/GDRDMA; NET/Socket on host b"
    assert slow[0].message.endswith("; NCCL ran it over NET/IB/GDRDMA; NET/Socket on host b")
    assert slow[1].data["nccl_transport"] == "P2P/CUMEM"
    assert "nccl_transport" not in slow[2].data


def _shared_job() -> tuple[list[str], dict[int, NcclAccount], dict[int, NcclAccount]]:
    """Five hosts of two ranks; hosts whose NCCL said the same share account objects, as rank 0 holds them
    (channel/board.fetch_interned), and the same accounts with every rank's its own copy."""
    ib, socket = accounts()[0], accounts(env_of=lambda name: {"NCCL_IB_DISABLE": "1"})[0]
    older = msgspec.structs.replace(socket, nccl_version="2.20.3")  # a second kind of host on sockets
    hosts = ["h0", "h0", "h1", "h1", "h2", "h2", "h3", "h3", "h4", "h4"]
    said = {"h0": ib, "h1": socket, "h2": ib, "h3": older, "h4": socket}
    shared = {rank: said[host] for rank, host in enumerate(hosts)}
    return hosts, shared, {rank: copy.deepcopy(account) for rank, account in shared.items()}


def test_hosts_that_said_the_same_are_judged_as_if_each_rank_said_it_alone_in_host_order():
    hosts, shared, alone = _shared_job()
    fact_list = [rank_facts(r, h, world_size=len(hosts), network=PORTS) for r, h in enumerate(hosts)]
    found = judged(shared, fact_list)
    assert found == judged(alone, fact_list)
    on_sockets = [f for f in found if f.check_id == "NCCL020"]  # two kinds of socket host, interleaved
    assert [(f.hosts, f.ranks) for f in on_sockets] == [(["h1"], [2, 3]), (["h3"], [6, 7]), (["h4"], [8, 9])]
    (version,) = [f for f in found if f.check_id == "NCCL024" and f.data["what"] == "NCCL version"]
    assert (version.hosts, version.ranks) == (["h3"], [6, 7])


def test_each_dimension_reads_a_group_of_one_host_or_of_every_rank_as_its_ranks_say():
    hosts, shared, _ = _shared_job()
    host_map = dict(enumerate(hosts))
    groups = {"tp": [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]], "world": [list(range(len(hosts)))],
              "pp": [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]}
    summary = summarize(shared, 0, groups, host_map)
    for dim in summary.dims:  # the same words as each group's own transport, counted per dimension
        said = Counter(group_transport(ranks, shared, host_map) for ranks in groups[dim.dim])
        assert dim.groups == len(groups[dim.dim])
        assert sorted(dim.transports) == sorted(text if len(said) == 1 else f"{text} ({n} group{'s' if n > 1 else ''})"
                                                for text, n in said.items())
    assert [d.intra_host_groups for d in summary.dims] == [5, 0, 0]
    # a rank without an account: the world group is read rank by rank, and says the same
    fewer = {rank: account for rank, account in shared.items() if rank != 9}
    world = summarize(fewer, 1, {"world": groups["world"]}, host_map).dims[0]
    assert world.transports == [group_transport(groups["world"][0], fewer, host_map)]
