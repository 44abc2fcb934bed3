"""A per-run secret (PREFLIGHT_SECRET) proves what is in the store comes from this run (channel/run_auth.py).

Real Exchange objects on a real loopback TCPStore; the foreign process is a plain store client
that knows the run's prefix and nonce (anyone connected can read both) but not the secret.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from torch.distributed import PrefixStore, TCPStore

from preflight.channel import keys
from preflight.channel.exchange import Exchange, RankPayload
from preflight.model import RankFacts, World
from preflight.model.messages import Verdict
from preflight.reports.json import load as load_report
from tests.helpers.ranks import free_port, start_rank, wait_for_ranks


def _world(rank: int, port: int) -> World:
    return World(launcher="env", rank=rank, world_size=3, host=f"node{rank}", master_addr="127.0.0.1",
                 master_port=port, run_id="env")


def _payload(rank: int, port: int) -> RankPayload:
    return RankPayload(rank, RankFacts(rank=rank, host=f"node{rank}", world=_world(rank, port)))


def test_with_a_run_secret_a_foreign_payload_and_a_forged_verdict_are_refused(monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_SECRET", "this-run")
    lead = Exchange(_world(0, 0), timeout_s=10.0)
    lead.open()
    port = lead.world.master_port
    member = Exchange(_world(1, port), timeout_s=10.0)
    member.open()
    assert member.store is not None and member.nonce == lead.nonce
    member.publish(_payload(1, port))

    # A foreign process: its own client, the run's prefix and nonce, another secret.
    foreign = Exchange(_world(2, port), timeout_s=10.0)
    foreign.store = PrefixStore(lead.prefix, TCPStore("127.0.0.1", port, None, False))
    foreign.nonce, foreign.secret = lead.nonce, b"guessed"
    foreign.publish(_payload(2, port))  # stands in for the absent rank 2
    foreign.store.set("verdict", '{"exit_code": 0, "verdict": "passed"}')  # tries to end the run with 0

    collected = lead.collect(timeout_s=2.0)
    assert sorted(collected.payloads) == [1]
    assert "PREFLIGHT_SECRET" in collected.bad_payloads[2]  # RUN002, never counted present
    assert member.wait_for(keys.VERDICT.key, 0.5) is None  # the forged verdict is not adopted
    assert "refused as forged" in member.refused["verdict"]
    lead.announce(keys.VERDICT.key, Verdict(3, "failed"))
    assert member.wait_for(keys.VERDICT.key, 5.0).exit_code == 3


def test_a_rank_with_another_secret_refuses_the_store_instead_of_publishing_into_it(monkeypatch) -> None:
    monkeypatch.setenv("PREFLIGHT_SECRET", "first-job")
    lead = Exchange(_world(0, 0), timeout_s=10.0)
    lead.open()
    monkeypatch.setenv("PREFLIGHT_SECRET", "second-job")  # another job's rank, same port, same run id "env"
    other = Exchange(_world(1, lead.world.master_port), timeout_s=10.0)
    other.open()
    assert other.store is None and other.foreign and "PREFLIGHT_SECRET" in other.store_error


FORGER = Path(__file__).resolve().parents[1] / "helpers" / "store_forger.py"


@pytest.mark.parametrize("secret", ["", "this-job"], ids=["no secret", "secret"])
def test_a_foreign_client_forges_the_verdict_and_an_absent_ranks_payload(tmp_path: Path, secret: str) -> None:
    """Real env:// ranks 0 and 1; in rank 2's place a foreign store client (tests/helpers/store_forger.py)
    forges the verdict (exit 0) and rank 2's payload blaming `innocent`. Without a run secret the
    forgery works (which is what PORT005 warns of); with one, it is refused: RUN002, rank 1 exits 3."""
    report_path = tmp_path / "r.json"
    port = free_port()
    common = {"PYTHONPATH": str(FORGER.parents[2]), **({"PREFLIGHT_SECRET": secret} if secret else {})}
    started = time.monotonic()
    procs = {rank: start_rank(rank, 3, ["run", "--skip", "probe", "--timeout", "15", "--json", str(report_path)],
                              common_env=common, port=port) for rank in (0, 1)}
    procs[2] = start_rank(2, 3, ["2", "innocent"], common_env=common, port=port, program=[str(FORGER)])
    runs = wait_for_ranks(procs, started, timeout=150)
    assert "forged" in runs[2].stdout, runs[2].stdout + runs[2].stderr
    report = load_report(report_path)
    assert report.exit_code == 3 and runs[0].returncode == 3
    blamed = [f for f in report.findings if f.check_id == "NCCL008"]
    if secret:
        assert report.meta.authenticated
        [refused] = [f for f in report.findings if f.check_id == "RUN002"]
        assert refused.ranks == [2] and "PREFLIGHT_SECRET" in refused.message
        assert not blamed and "innocent" not in report.bad_hosts
        assert runs[1].returncode == 3  # rank 0's code; the forged exit 0 was ignored
    else:  # the attack a store open to the network allows, and the finding that says so
        assert not report.meta.authenticated
        assert blamed and "innocent" in report.bad_hosts
        # The forged verdict sits in the store until rank 0 writes its own over it: rank 1 exits
        # with whichever it reads first (the forgery is accepted, nothing proves either).
        assert runs[1].returncode in (0, 3)
        assert [f.check_id for f in report.findings if f.check_id == "PORT005"] == ["PORT005"]
