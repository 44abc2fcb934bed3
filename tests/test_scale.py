"""Scale (issue 16): the cross checks, merging and the report's rank table grow O(N) or O(N log N).

No wall-clock bound: the same work is done at two sizes in the same run, and the Python lines
executed (a deterministic count, sys.settrace) are compared. Quadratic work would grow 16x
from N to 4N; linear work grows 4x, N log N a little more.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from preflight.model import (
    Finding,
    HealthFacts,
    IbCounters,
    JobReport,
    RankFacts,
    ReportMeta,
    Severity,
    SystemLimits,
    World,
)
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.placement_facts import AffinityFacts, PlacementFacts
from preflight.model.rank_table import _WORLD_SHARED, PackedRank, RankTable, Spooled, pack, packed
from preflight.model.rank_unpack import unpack
from preflight.registry import CROSS, JobView, select_checks
from preflight.reports import json as json_report
from preflight.steps.check_results import merge_findings
from preflight.steps.verdict import RunRecord, build_report
from tests.helpers.facts import cluster

PER_HOST = 8
# 4x the ranks may cost at most this many times the lines: linear x 1.5 (log factors, constants).
GROWTH_LIMIT = 6.0


def _world(hosts: int, missing_hosts: int = 2) -> list[RankFacts]:
    """hosts x 8 ranks, ~60 variables each, with planted faults: drift on one host, another torch on
    one rank, and the last `missing_hosts` hosts but one missing."""
    env = {f"APP_{i:02d}": f"value-{i}" for i in range(50)} | {"NCCL_SOCKET_IFNAME": "ib", "NCCL_DEBUG": "WARN"}
    ranks = cluster(hosts, PER_HOST, env=env, versions={"torch": "2.13.0", "nccl": "2.27.3"},
                    world_launcher="torchrun", world_num_nodes=hosts)
    for facts in ranks:
        facts.env.update(RANK=str(facts.rank), LOCAL_RANK=str(facts.rank % PER_HOST))
        if facts.host == "node003":
            facts.env["NCCL_SOCKET_IFNAME"] = "eth"
    ranks[5].versions.torch = "2.12.0"
    # Slurm-like: rank 0 alone holds the launcher's layout (no other rank ships it).
    ranks[0].world.expected_hosts = {facts.rank: facts.host for facts in ranks}
    gone = {f"node{h + 1:03d}" for h in range(hosts - missing_hosts, hosts)}
    return [facts for facts in ranks if facts.host not in gone]


def _lines(work: Callable[[], Any]) -> int:
    """Python lines executed by work(): an operation count that no machine's speed changes."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def _growth(work: Callable[[list[RankFacts], int], Any], hosts: int = 16) -> float:
    small, large = _world(hosts), _world(4 * hosts)
    work(small, hosts * PER_HOST)  # warm caches and imports outside the count
    return _lines(lambda: work(large, 4 * hosts * PER_HOST)) / _lines(lambda: work(small, hosts * PER_HOST))


def _cross_checks(ranks: list[RankFacts], world_size: int) -> list[Finding]:
    job = JobView(world_size=world_size, ranks=ranks)
    return [spec.finding(p) for spec in select_checks(CROSS, (), ()) for p in spec.func(job)]


def test_every_cross_check_is_linear_or_n_log_n() -> None:
    found = _cross_checks(_world(16), 16 * PER_HOST)
    assert {"RANK001", "ENV003", "SW001"} <= {f.check_id for f in found}  # the planted faults are seen
    for spec in select_checks(CROSS, (), ()):
        growth = _growth(lambda ranks, size, spec=spec: list(spec.func(JobView(world_size=size, ranks=ranks))))
        assert growth <= GROWTH_LIMIT, f"{spec.id} grows {growth:.1f}x for 4x the ranks"


def test_many_missing_ranks_are_one_finding_with_their_hosts() -> None:
    ranks = _world(64, missing_hosts=20)
    [missing] = [f for f in _cross_checks(ranks, 64 * PER_HOST) if f.check_id == "RANK001"]
    assert len(missing.ranks) == 20 * PER_HOST and missing.hosts == [f"node{h:03d}" for h in range(45, 65)]
    assert "160 ranks did not report" in missing.message and "ranks 352-511" in missing.message


def test_merging_one_finding_from_every_rank_is_linear() -> None:
    def merge(ranks: list[RankFacts], size: int) -> list[Finding]:
        return merge_findings(Finding("ENV001", Severity.WARN, "same", ranks=[f.rank], hosts=[f.host]) for f in ranks)

    assert _growth(merge) <= GROWTH_LIMIT
    [merged] = merge(_world(4), 32)
    assert merged.ranks == list(range(16)) and merged.hosts == ["node001", "node002"]


def test_rank_table_round_trips_and_stores_shared_values_once() -> None:
    ranks = _world(32)
    for facts in ranks:  # each process its own pid, as on a real job
        facts.system = SystemLimits(pid=1000 + facts.rank, cpu_count=8, memlock_bytes=-1, shm_bytes=1 << 30)
    table = pack(ranks)
    assert unpack(table) == ranks
    assert len(table.versions) == 2 and len(table.worlds) == 1  # one odd torch; one shared World
    assert len(table.system) == 1 and len(set(table.columns.pid)) == len(ranks)  # limits once, pids a column
    columns = table.columns
    assert columns is not None and not table.ranks  # schema 3: columns, no row per rank
    assert set(columns.env) == {"RANK", "LOCAL_RANK", "NCCL_SOCKET_IFNAME"}
    assert isinstance(columns.env["RANK"], list)  # every rank differs: dense
    assert columns.env["NCCL_SOCKET_IFNAME"] == {16: "eth", 17: "eth", 18: "eth", 19: "eth", 20: "eth", 21: "eth",
                                                  22: "eth", 23: "eth"}  # one host differs: sparse, by row
    assert _growth(lambda ranks, size: unpack(pack(ranks))) <= GROWTH_LIMIT
    # Every World field is either shared (interned) or the row's own: none is lost by packing.
    per_row = {"rank", "local_rank", "node_rank", "host", "raw", "expected_hosts"}
    assert {f.name for f in msgspec.structs.fields(World)} == per_row | set(_WORLD_SHARED)


def test_a_variable_that_skips_rows_after_the_first_round_trips() -> None:
    """A variable on rows 0, 1 and 3 only (its rows implicit until row 2 goes without), and one unset on some."""
    ranks = _world(4)
    for facts in ranks[:2] + ranks[3:4]:
        facts.env["ODD"] = f"v{facts.rank}"
    del ranks[5].env["APP_07"]
    table = pack(ranks)
    assert table.columns is not None and table.columns.env["ODD"] == {0: "v0", 1: "v1", 3: "v3"}
    assert table.columns.env_unset == {"APP_07": [5]}
    assert unpack(table) == ranks


def test_the_table_written_piece_by_piece_is_the_codec_s_bytes() -> None:
    """reports/json.py writes the rank table a column at a time (no whole copy at 131,072 ranks): the
    same bytes as encoding it at once, so it loads back as any table; its tables of distinct values are
    written from the bytes `pack` encoded to find their twins."""
    ranks = _world(8)
    ranks[3].network = msgspec.structs.replace(ranks[3].network, loopback_scope="its own")  # one more distinct section
    found = packed(ranks)
    assert len(found.table.network) == 2
    for name, encoded in found.encoded.items():
        assert encoded == [encode(value) for value in getattr(found.table, name)], name
    assert b"".join(json_report._table_pieces(found)) == encode(found.table)


def test_the_writer_keeps_only_the_encoded_own_parts_and_writes_the_same_table() -> None:
    """On GPU hosts each rank's own health and placement differ and are copies split from its joined
    sections: the JSON writer (`packed(..., keep_own_parts=False)`) keeps their encoded forms, not
    them, and writes the bytes of the whole table, which unpacks to the ranks."""
    ranks = _world(4)
    for facts in ranks:  # each rank its own bound GPU and CPUs; its host's port counters and NUMA CPUs
        host = int(facts.host[-3:])
        facts.health = HealthFacts(nvml="ok", bound_index=facts.rank % PER_HOST,
                                   ib_counters=[IbCounters("mlx5_0", 1, {"symbol_error": host})])
        facts.placement = PlacementFacts(affinity=AffinityFacts(cpus=[facts.rank], numa_cpus={0: [host]}))
    kept, light = packed(ranks), packed(ranks, keep_own_parts=False)
    assert len(kept.table.health) == PER_HOST and len(kept.table.placement) == len(ranks)  # distinct own parts
    assert light.table.health == [] and light.table.placement == []
    assert light.encoded == kept.encoded and len(light.encoded["placement"]) == len(ranks)
    written = b"".join(json_report._table_pieces(light))
    assert written == encode(kept.table)
    assert unpack(decode(written, RankTable)) == ranks


def test_the_writer_spools_the_own_parts_encoded_forms_to_its_folder_and_writes_the_same_table(tmp_path) -> None:
    """With a folder to spool in (json.write: the report's own), the encoded own parts go to a temporary file
    there, unlinked as it is made, and only their digests stay in memory; the bytes written are the same."""
    ranks = _world(4)
    for facts in ranks:  # each rank its own bound GPU and CPUs
        facts.health = HealthFacts(nvml="ok", bound_index=facts.rank % PER_HOST)
        facts.placement = PlacementFacts(affinity=AffinityFacts(cpus=[facts.rank]))
    kept, spooled = packed(ranks), packed(ranks, keep_own_parts=False, spool_in=str(tmp_path))
    assert isinstance(spooled.encoded["placement"], Spooled) and len(spooled.encoded["placement"]) == len(ranks)
    assert list(spooled.encoded["placement"]) == kept.encoded["placement"]
    assert list(os.listdir(tmp_path)) == []  # unlinked: nothing left behind, whatever happens to the writer
    written = b"".join(json_report._table_pieces(spooled))
    assert written == encode(kept.table)
    assert spooled.encoded["health"].file.closed  # let go once written
    report = JobReport(meta=ReportMeta("torchrun", "", "r", len(ranks), 1, "node001", 1), ranks=ranks)
    json_report.write(report, str(tmp_path / "report.json"))
    assert os.listdir(tmp_path) == ["report.json"] and json_report.load(tmp_path / "report.json").ranks == ranks


def test_a_schema_2_rank_table_a_row_per_rank_still_unpacks() -> None:
    """Reports written before the columns (a PackedRank per rank) load as they did."""
    ranks = _world(4)
    cols = pack(ranks).columns
    assert cols is not None
    rows = [PackedRank(rank=cols.rank[i], host=cols.host[i], world=cols.world[i], local_rank=cols.local_rank[i],
                       node_rank=cols.node_rank[i], versions=cols.versions[i], system=cols.system[i],
                       network=cols.network[i], gpus=cols.gpus[i], health=cols.health[i],
                       gather_errors=cols.gather_errors[i],
                       env={k: v for k, v in ranks[i].env.items() if pack(ranks).env_common.get(k) != v},
                       expected_hosts=ranks[i].world.expected_hosts) for i in range(len(ranks))]
    table = msgspec.structs.replace(pack(ranks), columns=None, ranks=rows)
    assert unpack(table) == ranks


def test_a_report_of_many_ranks_rerenders_from_its_json(tmp_path) -> None:
    from preflight.options import RunOptions
    from preflight.reports import html, text

    ranks = _world(64)
    record = RunRecord(World(launcher="torchrun", rank=0, world_size=64 * PER_HOST, host="node001"),
                       RunOptions().for_world(64 * PER_HOST))
    record.facts, record.all_facts = ranks[0], ranks
    record.findings = _cross_checks(ranks, 64 * PER_HOST)
    record.missing = [r for r in range(64 * PER_HOST) if r >= 62 * PER_HOST]
    report = build_report(record)
    path = tmp_path / "r.json"
    json_report.write(report, str(path))
    again = json_report.load(path)
    assert again == report
    assert text.render(again) == text.render(report) and html.render(again) == html.render(report)
    assert again.bad_hosts == ["node001", "node063", "node064"]  # another torch on rank 5; two hosts missing


@pytest.mark.parametrize("spoil", ["index", "length"])
def test_a_rank_table_that_does_not_fit_is_a_bad_payload(spoil: str) -> None:
    """An index past its table or columns of unequal length (a hand-edited report): BadPayload, no IndexError."""
    report = JobReport(meta=ReportMeta("torchrun", "", "r", 8, 1, "node001", 1), ranks=_world(1, missing_hosts=0))
    document = json.loads(json_report.dumps_bytes(report))
    columns = document["rank_table"]["columns"]
    if spoil == "index":
        columns["versions"][3] = 99
    else:
        columns["host"].pop()
    with pytest.raises(BadPayload, match="rank_table"):
        json_report.loads(json.dumps(document))
