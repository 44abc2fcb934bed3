"""Layout checks on hand-written facts."""

from __future__ import annotations

from tests.helpers.facts import cluster, rank_facts, run


def test_regular_layout_is_silent() -> None:
    ranks = cluster(4, 8)
    assert [run(i, ranks) for i in ("LAYOUT001", "LAYOUT002", "LAYOUT003", "LAYOUT004")] == [[], [], [], []]


def test_duplicate_local_rank_names_the_host_and_ranks() -> None:
    ranks = cluster(2, 2)
    ranks[1].world.local_rank = 0
    [finding] = run("LAYOUT001", ranks)
    assert finding.ranks == [0, 1] and finding.hosts == ["node001"]
    assert "LOCAL_RANK 0 is held by ranks 0-1 on node001" in finding.message


def test_duplicate_local_rank_on_many_hosts_is_one_finding() -> None:
    ranks = cluster(100, 2)
    for facts in ranks:
        facts.world.local_rank = 0
    [finding] = run("LAYOUT001", ranks)
    assert "(and 99 more clash(es))" in finding.message and len(finding.hosts) == 100


def test_uneven_local_world_size_names_the_odd_host() -> None:
    ranks = cluster(3, 2)
    for facts in ranks[4:]:
        facts.world.local_world_size = 4
    [finding] = run("LAYOUT002", ranks)
    assert finding.hosts == ["node003"] and finding.ranks == [4, 5]
    assert finding.message == "LOCAL_WORLD_SIZE differs: 2 on 2 hosts, 4 on node003"


def test_world_size_not_sum_of_local_sizes() -> None:
    ranks = [rank_facts(0, "a", world_size=3, local_world_size=2), rank_facts(1, "a", world_size=3, local_world_size=2),
             rank_facts(2, "b", world_size=3, local_world_size=2, local_rank=0)]
    [finding] = run("LAYOUT003", ranks)
    assert finding.hosts == ["b"] and finding.ranks == [2] and "add up to 4" in finding.message


def test_world_size_check_waits_for_a_complete_world() -> None:
    ranks = cluster(2, 2)[:3]  # rank 3 missing: RANK001's finding, not a layout one
    assert run("LAYOUT003", ranks, world_size=4) == []


def test_cyclic_placement_warns_once() -> None:
    ranks = [rank_facts(r, f"node{r % 4:02d}", world_size=16, local_world_size=4, local_rank=r // 4)
             for r in range(16)]
    [finding] = run("LAYOUT004", ranks)
    assert finding.severity.value == "warn" and len(finding.hosts) == 4
    assert "not contiguous on 4 host(s) [node[00-03]], e.g. node00 holds ranks 0,4,8,12" in finding.message


def test_a_missing_rank_is_not_a_non_contiguous_host() -> None:
    ranks = [f for f in cluster(4, 4) if f.rank != 6]  # rank 6 missing: RANK001's finding only
    assert run("LAYOUT004", ranks, world_size=16) == []


def _two_nodes_one_name(given: bool = True, scopes: tuple[str, str] = ("boot1/net1", "boot1/net1")) -> list:
    """Two nodes of two ranks each, both reporting the host name `vm` (two torchrun agents)."""
    return [rank_facts(r, "vm", world_size=4, local_world_size=2, world_node_rank=r // 2,
                       world_node_rank_given=given, network={"loopback_scope": scopes[r // 2]})
            for r in range(4)]


def test_nodes_that_share_a_host_name_are_two_nodes_not_a_layout_error() -> None:
    ranks = _two_nodes_one_name()
    assert [run(i, ranks) for i in ("LAYOUT001", "LAYOUT002", "LAYOUT003", "LAYOUT004")] == [[], [], [], []]
    [finding] = run("LAYOUT005", ranks)
    assert finding.severity.value == "warn" and finding.hosts == ["vm"] and finding.ranks == [0, 1, 2, 3]
    assert "2 nodes (node ranks 0-1) share the host name vm on one machine" in finding.message
    assert "exclude list" in finding.message and "NCCL" in finding.hint


def test_a_shared_host_name_across_network_namespaces_says_so() -> None:
    [finding] = run("LAYOUT005", _two_nodes_one_name(scopes=("boot1/net1", "boot1/net2")))
    assert "on different machines or network namespaces" in finding.message


def test_without_a_node_rank_from_the_launcher_a_shared_name_is_still_a_clash() -> None:
    ranks = _two_nodes_one_name(given=False)
    [clash] = run("LAYOUT001", ranks)
    assert "LOCAL_RANK 0 is held by ranks 0,2 on vm" in clash.message
    assert run("LAYOUT005", ranks) == []


def test_a_real_clash_inside_one_node_of_a_shared_name_names_the_node() -> None:
    ranks = _two_nodes_one_name()
    ranks[3].world.local_rank = 0
    [clash] = run("LAYOUT001", ranks)
    assert "LOCAL_RANK 0 is held by ranks 2-3 on vm (node 1)" in clash.message
