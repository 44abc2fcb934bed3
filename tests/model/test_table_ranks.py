"""A loaded report's ranks (model/table_ranks.py): the RankFacts its table packs, read by the
renderers from the table's columns without building them."""

from __future__ import annotations

import json

import msgspec
import pytest

from preflight.lib.env_drift import drifting_rows
from preflight.lib.secrets import REDACTED
from preflight.model import GpuFabric, GpuHealth, HealthFacts, IbCounters, IbPort, RankFacts, table_ranks
from preflight.model.codec import BadPayload, encode
from preflight.model.placement_facts import AffinityFacts, BuildFacts, DistBuild, PlacementFacts
from preflight.model.rank_table import pack
from preflight.model.rank_unpack import unpack
from preflight.model.table_ranks import TableRanks
from preflight.reports import fabric_table, html, text
from preflight.reports import json as json_report
from preflight.reports.drift_table import env_drift
from tests.helpers.facts import built_report, cluster

PER_HOST = 4


def _ranks() -> list[RankFacts]:
    """4 hosts x 4 ranks: a per-rank variable (a dense column), drift on one host (sparse), a common
    variable one rank lacks, a variable two ranks hold alone, a bare redaction; two NVLink domains."""
    env = {f"APP_{i}": f"value-{i}" for i in range(6)} | {"NCCL_SOCKET_IFNAME": "ib"}
    ranks = cluster(4, PER_HOST, env=env)
    fabric = {"node001": "aaaa", "node002": "aaaa", "node003": "bbbb"}  # node004: no fabric
    for facts in ranks:
        facts.env["RANK"] = str(facts.rank)
        if facts.host == "node002":
            facts.env["NCCL_SOCKET_IFNAME"] = "eth"
        if facts.host in fabric:
            unhealthy = facts.host == "node003" and facts.rank % 2 == 0
            gpu = GpuHealth(index=0, fabric=GpuFabric(state=3, cluster_uuid=fabric[facts.host], clique_id=1,
                                                      health_mask=1 if unhealthy else 0))
            facts.health = HealthFacts(nvml="ok", gpus=[gpu], imex_channels=["channel0"] if facts.rank < 8 else [])
    del ranks[6].env["APP_3"]
    ranks[9].env["ODD"] = ranks[13].env["ODD"] = "x"
    ranks[11].env["APP_5"] = REDACTED  # no key: left out of the drift, never compared
    return ranks


def _loaded(tmp_path, ranks: list[RankFacts]):
    report = built_report(ranks)
    path = tmp_path / "run.json"
    json_report.write(report, path)
    return report, json_report.load(path)


def test_loaded_ranks_are_the_packed_rankfacts_and_render_without_being_built(tmp_path) -> None:
    report, again = _loaded(tmp_path, _ranks())
    loaded = again.ranks
    assert isinstance(loaded, TableRanks) and len(loaded) == len(report.ranks)
    # What the renderers read, from the columns: what each RankFacts holds.
    assert list(table_ranks.rank_numbers(loaded)) == [f.rank for f in report.ranks]
    assert list(table_ranks.hosts(loaded)) == [f.host for f in report.ranks]
    assert table_ranks.health(loaded) == [f.health for f in report.ranks]
    names = {name for facts in report.ranks for name in facts.env}
    assert table_ranks.env_differing(loaded) == {"RANK", "NCCL_SOCKET_IFNAME", "APP_3", "ODD", "APP_5"}
    for name in names:
        assert table_ranks.env_values(loaded, name) == [f.env.get(name) for f in report.ranks], name
    assert drifting_rows(loaded) == drifting_rows(report.ranks)
    assert set(drifting_rows(loaded)) == {"APP_3", "NCCL_SOCKET_IFNAME", "ODD"}
    assert env_drift(again) == env_drift(report) and fabric_table.rows(again) == fabric_table.rows(report)
    assert [row[0] for row in fabric_table.rows(again)] == ["aaaa/1", "bbbb/1"]  # domain/clique
    assert text.render(again) == text.render(report) and html.render(again) == html.render(report)
    assert loaded._facts is None  # none of that built a RankFacts
    assert loaded == report.ranks and report.ranks == loaded  # built when asked for, equal both ways
    assert loaded[6].env == report.ranks[6].env and "APP_3" not in loaded[6].env
    # The codec writes it as the list it reads as (each environment in its table's order).
    assert json.loads(encode(loaded)) == json.loads(encode(report.ranks))


@pytest.mark.parametrize("spoil", ["negative index", "env row past the rows", "unset row past the rows",
                                   "dense column longer than the rows", "a host part column missing",
                                   "negative health index", "negative env row", "negative unset row"])
def test_a_table_that_unpack_could_not_read_is_refused_when_loaded(tmp_path, spoil: str) -> None:
    """The RankFacts are built later (on first use), so every table they could not be built from is
    refused where the report is loaded: a BadPayload, never an IndexError in a renderer."""
    report = built_report(_ranks())
    document = json.loads(json_report.dumps_bytes(report))
    columns = document["rank_table"]["columns"]
    if spoil == "negative index":
        columns["network"][2] = -1
    elif spoil == "negative health index":  # (past its table is the default section; below it, nothing)
        columns["health"][2] = -1
    elif spoil == "negative env row":
        columns["env"]["ODD"]["-1"] = "x"
    elif spoil == "negative unset row":
        columns["env_unset"]["APP_3"].append(-1)
    elif spoil == "env row past the rows":
        columns["env"]["ODD"]["99"] = "x"
    elif spoil == "unset row past the rows":
        columns["env_unset"]["APP_3"].append(16)
    elif spoil == "a host part column missing":  # the NUMA CPUs would be joined, the build fingerprint lost
        columns["build"] = []
    else:
        columns["env"]["RANK"].append("16")
    with pytest.raises(BadPayload, match="rank_table"):
        json_report.loads(json.dumps(document))


def test_the_host_parts_of_health_and_placement_are_stored_once_per_distinct_value(tmp_path) -> None:
    """On GPU hosts each rank's health and placement are its own, but the ports' counters, the NUMA CPUs and
    the build fingerprint are its host's: the table holds those once per distinct value, and gives every
    rank back whole."""
    ranks = _ranks()
    numa = {0: [0, 1], 1: [2, 3]}
    for facts in ranks:
        node, local = divmod(facts.rank, PER_HOST)
        facts.health = HealthFacts(nvml="ok", bound_index=local, gpus=[GpuHealth(index=local, temperature_c=local)],
                                   ib_counters=[IbCounters("mlx5_0", 1, {"symbol_error": node})])
        build = BuildFacts(taken=True, dists=[DistBuild(name="torch", version="2.13.0")]) if not local else BuildFacts()
        facts.placement = PlacementFacts(build=build, affinity=AffinityFacts(cpus=[local], numa_cpus=dict(numa)))
    table = pack(ranks)
    assert len(table.ib_counters) == 4 and len(table.numa_cpus) == 1 and len(table.builds) == 2
    assert not [h for h in table.health if h.ib_counters] and not [p for p in table.placement if p.affinity.numa_cpus]
    assert unpack(table) == ranks
    report, again = _loaded(tmp_path, ranks)
    assert again.ranks == report.ranks and table_ranks.health(again.ranks) == [f.health for f in ranks]
    assert again.ranks[4].placement.build.dists and not again.ranks[5].placement.build.dists


def test_the_hosts_rdma_ports_are_stored_once_per_distinct_list_apart_from_their_network_sections(tmp_path) -> None:
    """Schema 5: a host's network section is its own (its addresses), its RDMA ports most often the job's: the
    table holds each distinct port list once and gives every rank its host's whole section back, in memory and
    from the JSON. A report written before (its ports inside each network section, no ib_ports column) still loads."""
    ranks = _ranks()
    healthy = [IbPort(f"mlx5_{i}", 1, state="ACTIVE", rate_gbps=400.0, netdevs=[f"ib{i}"]) for i in range(4)]
    for facts in ranks:
        ports = [msgspec.structs.replace(p) for p in healthy]
        if facts.host == "node003":
            ports[2].state = "DOWN"
        facts.network = msgspec.structs.replace(facts.network, ib_ports=ports, loopback_scope=f"boot-{facts.host}")
    table = pack(ranks)
    assert len(table.network) == 4 and not [n for n in table.network if n.ib_ports]
    assert len(table.ib_ports) == 2 and table.columns.ib_ports == [0] * 8 + [1] * 4 + [0] * 4
    assert unpack(table) == ranks
    again = unpack(table)
    assert again[0].network is again[3].network and again[0].network.ib_ports is again[4].network.ib_ports
    report, loaded = _loaded(tmp_path, ranks)
    assert loaded.ranks == report.ranks and [f.network for f in loaded.ranks] == [f.network for f in ranks]
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["schema"] == 5 and len(written["rank_table"]["ib_ports"]) == 2
    # As schema 4 wrote it: each host's ports in its network section, no ports column.
    old = msgspec.structs.replace(table, network=[msgspec.structs.replace(n, ib_ports=table.ib_ports[p]) for n, p in
                                              ((table.network[i], table.columns.ib_ports[row]) for row, i in
                                               enumerate(table.columns.network))],
                              ib_ports=[], columns=msgspec.structs.replace(table.columns, ib_ports=[],
                                                                       network=list(range(len(ranks)))))
    assert unpack(old) == ranks
