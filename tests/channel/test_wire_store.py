"""Payloads through the store by reference (channel/sections.store_form, issue 44): each shared section
is written once under its digest, a rank sends only its own document and the digests, rank 0
rebuilds every rank's facts from the sections, and empties what it has read.

On a real TCPStore (hosted in this process, as rank 0 hosts it), with Exchange.publish and
Exchange.collect as the ranks run them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from torch.distributed import PrefixStore, TCPStore

from preflight.channel import keys
from preflight.channel.exchange import Exchange
from preflight.channel.sections import store_form
from preflight.channel.wire import RankPayload, SharedSections, from_wire, to_wire
from preflight.model import (
    CheckOutcome,
    GpuFacts,
    GpuHealth,
    HealthFacts,
    IbCounters,
    IbPort,
    Interface,
    NetworkFacts,
    RankFacts,
    Severity,
    World,
)
from preflight.model.codec import BadPayload
from preflight.model.placement_facts import AffinityFacts, BuildFacts, DistBuild, PlacementFacts

PER_HOST, HOSTS = 4, 2


class Recording:
    """The store as a rank's Exchange uses it, recording every key written and its value."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.written: list[tuple[str, bytes]] = []

    def set(self, key: str, value: bytes) -> None:
        self.written.append((key, value))
        self.store.set(key, value)

    def multi_set(self, keys_: list[str], values: list[bytes]) -> None:
        self.written += list(zip(keys_, values, strict=True))
        self.store.multi_set(keys_, values)

    def check(self, keys_: list[str]) -> bool:
        return self.store.check(keys_)

    def append(self, key: str, value: str) -> None:
        self.store.append(key, value)


def _payload(rank: int, env_drift: bool = False) -> RankPayload:
    node, local = divmod(rank, PER_HOST)
    host = f"node{node}"
    world = World(launcher="env", rank=rank, world_size=PER_HOST * HOSTS, local_rank=local, node_rank=node,
                  host=host, run_id="wire-store", raw={"RANK": str(rank), "JOB": "7"})
    network = NetworkFacts(interfaces=[Interface(name="eth0", up=True, mtu=9000, addresses=[f"10.0.0.{node}"])],
                           ib_ports=[IbPort("mlx5_0", 1, state="ACTIVE", rate_gbps=400.0, netdevs=["ib0"])],
                           loopback_scope=f"boot-{node}")
    gpus = [GpuFacts(index=i, name="H100", uuid=f"GPU-{node}-{i}") for i in range(2)]
    env = {"NCCL_IB_HCA": "mlx5_9" if env_drift else "mlx5", "HOME": "/root", "RANK": str(rank)}
    # As on a GPU node: each rank's own bound GPU; its host's port counters and NUMA CPUs; the build
    # fingerprint on the host's local rank 0 (the one that takes it).
    health = HealthFacts(nvml="ok", bound_index=local, gpus=[GpuHealth(index=local, temperature_c=30 + rank)],
                         ib_counters=[IbCounters("mlx5_0", 1, {"symbol_error": node, "link_downed": 0})])
    build = BuildFacts(taken=True, dists=[DistBuild(name="torch", version="2.13.0", digest="ab12")]) if not local \
        else BuildFacts()
    placement = PlacementFacts(build=build, affinity=AffinityFacts(cpus=[local], numa_cpus={0: [0, 1], 1: [2, 3]}))
    facts = RankFacts(rank=rank, host=host, world=world, env=env, network=network, gpus=gpus, health=health,
                      placement=placement)
    outcomes = [CheckOutcome("ENV001", "env", "local", "one", Severity.OK, 0.000125 * (rank + 1))]
    return RankPayload(rank, facts, outcomes=outcomes)


@pytest.fixture
def store():
    """A real TCPStore hosted here, under a run's prefix."""
    root = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=30), wait_for_workers=False)
    return PrefixStore("preflight/wire-store/", root)


def _publish(store: Any, payloads: list[RankPayload]) -> Recording:
    recording = Recording(store)
    for payload in payloads:
        exchange = Exchange(payload.facts.world, timeout_s=10.0)
        exchange.store = recording
        exchange.publish(payload)
    return recording


def _collect(store: Any, world_size: int = PER_HOST * HOSTS) -> Any:
    """Rank 0's collect of ranks 1..world_size-1 (every one of them has published)."""
    lead = Exchange(World(launcher="env", rank=0, world_size=world_size, run_id="wire-store"), timeout_s=10.0)
    lead.store = store
    return lead.collect(timeout_s=10.0)


def test_each_section_is_written_once_a_rank_sends_its_own_document_and_rank_0_rebuilds_every_rank(store) -> None:
    sent = [_payload(rank, env_drift=rank == 6) for rank in range(1, PER_HOST * HOSTS)]
    recording = _publish(store, sent)
    section_writes = [key for key, _ in recording.written if key.startswith("shared/")]
    # env (the job's, and rank 6's own), world, versions, network x 2 hosts, GPUs x 2 hosts, outcomes, the
    # agreeing options (issue 47), the port counters x 2 hosts, the NUMA CPUs (alike on both), the build
    # fingerprint (rank 4's, the only local rank 0 here) and the empty one of the others, the RDMA ports
    # (alike on both hosts: one section for the job)
    assert len(section_writes) == len(set(section_writes)) == 16
    payloads = {key: value for key, value in recording.written if key.startswith("rank/")}
    # sent once per host or job, not per rank
    host_bytes = (b"interfaces", b"mlx5", b'numa_cpus":{"', b'"torch"', b"ACTIVE")
    assert len(payloads) == 7 and not [v for v in payloads.values() if any(part in v for part in host_bytes)]
    collected = _collect(store)
    assert not collected.bad_payloads
    assert [collected.payloads[p.rank].facts for p in sent] == [p.facts for p in sent]
    got = collected.payloads
    assert got[6].facts.env["NCCL_IB_HCA"] == "mlx5_9" and got[5].facts.env["NCCL_IB_HCA"] == "mlx5"
    assert got[5].facts.env.shared is got[7].facts.env.shared is not got[6].facts.env.shared
    assert got[1].facts.network is got[3].facts.network is not got[4].facts.network
    assert got[1].facts.network.ib_ports is got[4].facts.network.ib_ports  # the job's, once
    assert got[1].facts.health.ib_counters is got[3].facts.health.ib_counters  # the host's, once
    assert got[4].facts.placement.build.dists and not got[5].facts.placement.build.dists
    assert [list(got[r].outcome_us) for r in (1, 2)] == [[250], [375]]
    # What rank 0 read is emptied: the store no longer holds the payloads or the sections.
    assert {bytes(store.get(key)) for key, _ in recording.written if key.startswith(("rank/", "shared/"))} == {b""}


def test_a_rank_whose_section_differs_from_its_hosts_first_rank_sends_it_and_is_seen_with_it(store) -> None:
    sent = [_payload(rank) for rank in range(1, PER_HOST)]
    sent[2].facts.gpus = sent[2].facts.gpus[:1]  # rank 3 sees one GPU where its host's first rank sees two
    recording = _publish(store, sent)
    written = [key for key, _ in recording.written if key.startswith("shared/")]
    assert len(written) == 12  # rank 1's eleven sections and rank 3's own GPU list
    collected = _collect(store, PER_HOST)
    assert [len(collected.payloads[r].facts.gpus) for r in (1, 2, 3)] == [2, 2, 1]


def test_a_section_absent_or_not_matching_its_digest_is_a_bad_payload_of_the_ranks_that_name_it(store) -> None:
    sent = [_payload(rank) for rank in range(1, PER_HOST * HOSTS)]
    _publish(store, sent)
    network = {host: store_form(to_wire(sent[host * PER_HOST]))[0] for host in (0, 1)}
    first = from_wire(to_wire(sent[0]), SharedSections())
    digest_of = {host: network[host].split(b'"network":"')[1][:32].decode() for host in (0, 1)}
    store.set(keys.SECTION.at(digest_of[0]), b'{"interfaces":[]}')  # another value under host 0's digest
    store.delete_key(keys.SECTION.at(digest_of[1]))
    collected = _collect(store)
    assert sorted(collected.bad_payloads) == [1, 2, 3, 4, 5, 6, 7]
    assert "does not match its digest" in collected.bad_payloads[1]
    assert "is not in the store" in collected.bad_payloads[4]
    assert first.facts.network.interfaces  # the sections themselves were fine: only the store's copy


def test_a_digest_that_is_not_one_and_an_unknown_digest_are_bad_payloads() -> None:
    wire, sections = store_form(to_wire(_payload(1)))
    shared = SharedSections()
    with pytest.raises(BadPayload, match="never reached rank 0"):
        from_wire(wire, shared)
    digest = next(iter(sections))
    with pytest.raises(BadPayload, match="neither a value nor a digest"):
        from_wire(wire.replace(digest.encode(), b"../../etc/passwd"), shared)
    wanted = shared.missing([wire])
    assert sorted(wanted.values()) == ["build", "env", "gpus", "ib_counters", "ib_ports", "network", "numa_cpus",
                                       "options", "outcomes", "versions", "world"]
    assert shared.learn(wanted, [sections[d] for d in wanted]) == list(wanted)
    assert from_wire(wire, shared).facts == _payload(1).facts


def test_bytes_that_are_not_a_payload_go_as_they_are_and_are_refused_by_rank_0(store) -> None:
    assert store_form(b'{"rank": 1, "facts": "not facts"}') == (b'{"rank": 1, "facts": "not facts"}', {})
    store.set(keys.PAYLOAD.at(1), b'{"rank": 1, "facts": "not facts"}')
    store.append(keys.ARRIVALS.key, "1,")
    collected = _collect(store, 2)
    assert list(collected.bad_payloads) == [1]
