"""Layout checks on hand-written facts."""

from __future__ import annotations

from preflight.checks.rank_roster import missing_ranks, world_disagreement
from preflight.model import RankFacts, World
from preflight.registry import JobView


def facts(rank: int, host: str, **world) -> RankFacts:
    base = {"launcher": "slurm", "rank": rank, "world_size": 4, "host": host}
    base.update(world)
    return RankFacts(rank=rank, host=host, world=World(**base))


def test_missing_rank_names_the_slurm_host() -> None:
    layout = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    present = [facts(r, layout[r], expected_hosts=layout) for r in (0, 1, 2)]
    [problem] = missing_ranks(JobView(world_size=4, ranks=present))
    assert problem.ranks == [3] and problem.hosts == ["n2"] and "expected on n2" in problem.message


def test_missing_rank_on_a_torchrun_node_named_by_its_siblings() -> None:
    present = [facts(r, "a" if r < 2 else "b", launcher="torchrun", local_world_size=2, num_nodes=2)
               for r in (0, 1, 2)]
    [problem] = missing_ranks(JobView(world_size=4, ranks=present))
    assert problem.hosts == ["b"]


def test_nothing_missing_is_silent() -> None:
    assert list(missing_ranks(JobView(world_size=4, ranks=[facts(r, "n") for r in range(4)]))) == []


def test_disagreement_names_the_odd_rank() -> None:
    ranks = [facts(r, f"n{r}") for r in range(4)]
    ranks[2].world.master_port = 1
    [problem] = world_disagreement(JobView(world_size=4, ranks=ranks))
    assert problem.ranks == [2] and problem.hosts == ["n2"] and "master_port is 1" in problem.message
    assert list(world_disagreement(JobView(ranks=[facts(r, "n") for r in range(4)]))) == []
