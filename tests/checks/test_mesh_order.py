"""LAYOUT006 (checks/mesh_order.py): a mesh dimension spanning hosts or NVLink domains where another --mesh
order keeps it inside one, on hand-written facts (the multi-rank run is test_fabric_multirank.py)."""

from __future__ import annotations

from preflight.checks.mesh_order import first_spanning_group
from preflight.model import RankFacts
from tests.helpers.facts import host_facts, rank_facts, run

RACK = "2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01"


def messages(ranks: list[RankFacts], mesh: list[tuple[str, int]]) -> list[str]:
    return [f.message for f in run("LAYOUT006", ranks, mesh=mesh)]


def in_domain(rank: int, host: str, domain: str, world: int) -> RankFacts:
    """A rank whose bound GPU registered with NVLink domain `<cluster>/<clique>` ("" for none)."""
    cluster, _, clique = domain.rpartition("/")
    fabric = {"state": 3, "cluster_uuid": cluster, "clique_id": int(clique)} if domain else {"state": 0}
    return rank_facts(rank, host, world_size=world, local_world_size=2,
                      health={"nvml": "ok", "gpus": [{"index": rank % 2, "fabric": fabric}]})


def test_the_missions_mesh_written_the_other_way_round() -> None:
    """8 ranks on two 4-GPU hosts: `tp4,pp2` puts each tp group on both hosts; `pp2,tp4` keeps it on one."""
    ranks = host_facts(["h1", "h2"], per_host=4)
    assert messages(ranks, [("tp", 4), ("pp", 2)]) == [
        "tp groups span hosts with --mesh tp4,pp2: e.g. ranks 0,2,4,6 on h1, h2; --mesh pp2,tp4 keeps every tp "
        "group inside one host (pp then spans hosts instead)"]
    assert messages(ranks, [("pp", 2), ("tp", 4)]) == []
    (finding,) = run("LAYOUT006", ranks, mesh=[("tp", 4), ("pp", 2)])
    assert finding.ranks == [0, 2, 4, 6] and finding.hosts == ["h1", "h2"]
    assert finding.data["better_mesh"] == "pp2,tp4"


def test_no_finding_where_no_order_does_better() -> None:
    """tp4 on 2-GPU hosts spans two hosts whatever the order; pp innermost would only spread tp wider."""
    ranks = host_facts(["h1", "h2", "h3", "h4"], per_host=2)
    assert messages(ranks, [("pp", 2), ("tp", 4)]) == []
    assert messages(host_facts(["h1"], per_host=8), [("tp", 4), ("pp", 2)]) == []  # one host: nothing spans


def test_the_neediest_dimension_goes_innermost_in_three_dimensions() -> None:
    ranks = host_facts(["h1", "h2", "h3", "h4"], per_host=4)
    found = messages(ranks, [("tp", 4), ("dp", 2), ("pp", 2)])
    assert found == ["tp groups span hosts with --mesh tp4,dp2,pp2: e.g. ranks 0,4,8,12 on h1, h2, h3, h4; "
                     "--mesh dp2,pp2,tp4 keeps every tp group inside one host (dp, pp then span hosts instead)"]


def test_nvlink_domains_across_hosts_count_as_one() -> None:
    """Two NVL72 racks, two 2-GPU trays each: a tp4 group across the trays of one rack stays on NVLink."""
    domains = [f"{RACK}/1"] * 4 + [f"{RACK}/2"] * 4
    ranks = [in_domain(r, f"tray{r // 2}", domains[r], 8) for r in range(8)]
    assert messages(ranks, [("pp", 2), ("tp", 4)]) == []  # spans hosts, not domains: fine
    (message,) = messages(ranks, [("tp", 4), ("pp", 2)])
    assert message.startswith(f"tp groups span NVLink domains with --mesh tp4,pp2: e.g. ranks 0,2,4,6 on {RACK}/1, "
                              f"{RACK}/2; --mesh pp2,tp4 keeps every tp group inside one NVLink domain")


def test_missing_ranks_or_a_single_dimension_are_left_alone() -> None:
    ranks = host_facts(["h1", "h2"], per_host=4)
    assert messages(ranks[:7], [("tp", 4), ("pp", 2)]) == []  # RANK001 names the missing rank
    assert messages(ranks, [("tp", 8)]) == []


def test_spanning_groups_are_found_by_size_and_stride() -> None:
    domains = ["a", "a", "b", "b", "a", "a", "b", "b"]
    assert first_spanning_group(domains, 2, 1) is None  # [0,1] [2,3] ... each inside
    assert first_spanning_group(domains, 2, 2) == [0, 2]
    assert first_spanning_group(domains, 4, 2) == [0, 2, 4, 6]
    assert first_spanning_group(["a"] * 5 + ["b"] * 3, 2, 4) == [1, 5]


def test_a_large_job_is_judged_in_one_pass() -> None:
    """16,384 ranks on 2,048 hosts in a 4-dimensional mesh: every order judged without timing out."""
    hosts = 2048
    ranks = [rank_facts(r, f"n{r // 8:04d}", world_size=hosts * 8, local_world_size=8) for r in range(hosts * 8)]
    (message,) = messages(ranks, [("tp", 8), ("dp", 64), ("cp", 2), ("pp", 16)])
    assert message.endswith("--mesh dp64,cp2,pp16,tp8 keeps every tp group inside one host"), message  # the nearest


def test_the_check_grows_linearly_with_the_ranks() -> None:
    """Python lines run for 4x the ranks (tests/test_scale.py's measure): at most GROWTH_LIMIT x."""
    from tests.test_scale import GROWTH_LIMIT, _lines

    def judge(hosts: int) -> int:
        ranks = host_facts([f"h{i:03d}" for i in range(hosts)], per_host=8)
        mesh = [("tp", 8), ("dp", hosts // 4), ("pp", 4)]
        return _lines(lambda: messages(ranks, mesh))

    judge(8)  # imports and caches outside the count
    assert judge(64) / judge(16) <= GROWTH_LIMIT
