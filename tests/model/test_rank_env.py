"""RankEnv (preflight/model/rank_env.py) reads, compares, encodes and packs as the dict it stands for."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.lib.env_drift import drifting
from preflight.model import RankFacts, World, table_ranks
from preflight.model.codec import decode, encode, to_builtins
from preflight.model.rank_env import RankEnv, shared_of
from preflight.model.rank_table import pack
from preflight.model.rank_unpack import unpack
from tests.fuzz.strategies import FUZZ

NAMED = ["A", "B", "C", "NCCL_IB_HCA", "SLURM_PROCID", "RANK", "OMP_NUM_THREADS"]
NAMES = st.sampled_from(NAMED)
ENVS = st.dictionaries(NAMES, st.sampled_from(["", "0", "1", "x", "mlx5"]), max_size=6)


def test_it_reads_as_the_merged_dict_with_the_ranks_own_value_winning() -> None:
    shared = {"A": "1", "B": "2"}
    env = RankEnv(shared, {"B": "own", "C": "3"})
    assert env == {"A": "1", "B": "own", "C": "3"} and {"A": "1", "B": "own", "C": "3"} == env
    assert env["B"] == "own" and env.get("A") == "1" and env.get("Z") is None and env.get("Z", "d") == "d"
    assert "C" in env and "Z" not in env and len(env) == 3 and sorted(env) == ["A", "B", "C"]
    assert dict(env.items()) == {"A": "1", "B": "own", "C": "3"}
    assert env != {"A": "1", "B": "2", "C": "3"} and env != {"A": "1", "B": "own"}
    with pytest.raises(KeyError):
        env["Z"]
    with pytest.raises(TypeError):
        hash(env)
    assert shared == {"A": "1", "B": "2"}  # never written through
    assert shared_of(env) == (shared, {"B": "own", "C": "3"}) and shared_of({"A": "1"}) == (None, {"A": "1"})


def test_it_encodes_as_the_dict_and_a_rank_holding_one_equals_the_same_rank_with_a_dict() -> None:
    env = RankEnv({"A": "1"}, {"RANK": "3"})
    facts = RankFacts(rank=3, host="h", world=World(launcher="torchrun", rank=3, world_size=4), env=env)
    plain = msgspec.structs.replace(facts, env={"A": "1", "RANK": "3"})
    assert facts == plain
    assert encode(facts) == encode(plain)
    assert to_builtins(facts) == to_builtins(plain)
    assert decode(encode(facts), RankFacts) == plain


def _ranks(shared: dict[str, str], owns: list[dict[str, str]], lone: dict[str, str]) -> list[RankFacts]:
    """Rank 0 with a plain dict (as rank 0's own payload is), the others sharing `shared`."""
    world = World(launcher="slurm", rank=0, world_size=len(owns) + 1)
    ranks = [RankFacts(rank=0, host="h0", world=world, env=lone)]
    for rank, own in enumerate(owns, start=1):
        ranks.append(RankFacts(rank=rank, host=f"h{rank}", world=msgspec.structs.replace(world, rank=rank),
                               env=RankEnv(shared, own)))
    return ranks


def _as_dicts(ranks: list[RankFacts]) -> list[RankFacts]:
    return [msgspec.structs.replace(facts, env=dict(facts.env)) for facts in ranks]


@FUZZ
@given(shared=ENVS, owns=st.lists(ENVS, min_size=1, max_size=12), lone=ENVS, other=ENVS)
def test_pack_and_drift_see_a_rank_env_exactly_as_its_dict(shared, owns, lone, other) -> None:
    """The shared part is compared once per distinct dict (pack's columns, the drift's candidates):
    the table, each variable's values and the drift groups equal those of the same ranks holding plain dicts, a second
    shared dict included, and the table unpacks to ranks equal to them."""
    ranks = _ranks(shared, owns, lone)
    ranks[-1] = msgspec.structs.replace(ranks[-1], env=RankEnv(other, owns[-1]))  # a second shared part
    plain = _as_dicts(ranks)
    assert pack(ranks) == pack(plain)
    for name in NAMED:  # each rank's value, read a shared part at a time (table_ranks._values_of)
        assert table_ranks.env_values(ranks, name) == [f.env.get(name) for f in plain], name
    assert unpack(pack(ranks)) == plain
    drifting.forget()
    fast = {name: {value: [f.rank for f in group] for value, group in groups.items()}
            for name, groups in drifting(ranks).items()}
    drifting.forget()
    slow = {name: {value: [f.rank for f in group] for value, group in groups.items()}
            for name, groups in drifting(plain).items()}
    assert fast == slow


def test_unpacked_ranks_share_the_common_environment_and_a_row_lacking_a_variable_has_its_own() -> None:
    shared = {"A": "1", "B": "2", "C": "3"}
    ranks = _ranks(shared, [{"RANK": str(r)} for r in range(1, 9)], {"A": "1", "B": "2", "RANK": "0"})
    back = unpack(pack(ranks))
    assert back == _as_dicts(ranks)
    envs = [facts.env for facts in back]
    assert not isinstance(envs[0], RankEnv) and "C" not in envs[0]  # rank 0 lacks C: a dict of its own
    assert all(isinstance(env, RankEnv) and env.shared is envs[1].shared for env in envs[1:])
