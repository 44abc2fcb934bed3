"""Network and reachability checks on hand-written facts (fast; the netns tests fire them for real)."""

from __future__ import annotations

from typing import Any

from preflight.lib.grouping import distinct_networks
from preflight.model import RankFacts, ReachabilityOutcome
from tests.helpers.facts import rank_facts, run
from tests.helpers.ranks import base_env, run_cli


def facts(rank: int, host: str, **network: Any) -> RankFacts:
    return rank_facts(rank, host, world_size=4, network=network)


IB0 = {"name": "ib0", "up": True, "mtu": 4092, "addresses": ["10.0.0.1"]}


def test_chosen_interface_down_or_without_address() -> None:
    chosen = {"name": "ib0", "source": "GLOO_SOCKET_IFNAME=ib0", "address": "", "up": False, "mtu": 1500}
    problems = run("NET001", facts(0, "a", chosen_interface=chosen))
    assert "is down and has no address" in problems[0].message
    assert run("NET001", facts(0, "a", chosen_interface={**chosen, "up": True, "address": "10.0.0.1"})) == []


def test_ib_port_state_and_rates() -> None:
    good = {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate": "400 Gb/sec (4X NDR)"}
    bad = {**good, "state": "INIT"}
    assert run("NET002", facts(0, "a", ib_ports=[good])) == []
    assert "INIT" in run("NET002", facts(0, "a", ib_ports=[good, bad]))[0].message
    slow = {**good, "rate": "200 Gb/sec (4X HDR)"}
    ranks = [facts(0, "a", ib_ports=[good]), facts(1, "b", ib_ports=[good]), facts(2, "c", ib_ports=[slow])]
    problems = run("NET005", ranks)
    assert len(problems) == 1 and problems[0].hosts == ["c"]
    assert run("NET005", ranks[:2]) == []


def test_mtu_and_master_addr_across_hosts() -> None:
    chosen = {"name": "ib0", "mtu": 4092}
    ranks = [facts(r, h, chosen_interface={**chosen, "mtu": m}) for r, h, m in [(0, "a", 4092), (1, "b", 4092),
                                                                                  (2, "c", 1500)]]
    assert [p.hosts for p in run("NET006", ranks)] == [["c"]]
    loop = [facts(0, "a", master_addr={"addr": "localhost", "ips": ["127.0.0.1"], "error": ""}),
            facts(1, "b", master_addr={"addr": "localhost", "ips": ["127.0.0.1"], "error": ""})]
    assert "loopback" in run("NET004", loop)[0].message
    assert run("NET004", loop[:1]) == []  # one host: loopback is fine
    for f in loop:
        f.network.loopback_scope = "boot-1/4026531840"
    assert run("NET004", loop) == []  # two fake hosts of one machine share loopback
    # One section for every rank of the job (rank 0 decodes a section alike once): read once, each rank named.
    shared = [facts(r, h) for r, h in [(0, "a"), (1, "a"), (2, "b"), (3, "b")]]
    section = facts(0, "a", master_addr={"addr": "localhost", "ips": ["127.0.0.1"], "error": ""}).network
    for f in shared:
        f.network = section
    [finding] = run("NET004", shared)
    assert finding.ranks == [0, 1, 2, 3] and finding.hosts == ["a", "b"] and len(distinct_networks(shared)) == 1
    unresolved = facts(0, "a", master_addr={"addr": "x", "ips": [], "error": "gaierror: no such name"})
    assert "does not resolve" in run("NET003", unresolved)[0].message
    empty = facts(0, "a")
    empty.env["MASTER_ADDR"] = ""
    assert "set but empty" in run("NET003", empty)[0].message


def _outcome(failed: set[tuple[str, str]], hosts: str = "abcd") -> ReachabilityOutcome:
    results = {p: [{"target": t, "ok": (p, t) not in failed, "error": "timed out", "interface": "ib0",
                    "address": f"10.0.0.{t}"} for t in hosts if t != p] for p in hosts}
    return ReachabilityOutcome.from_collected([{"host": h, "interface": "ib0", "address": h} for h in hosts],
                                              results, [], 2, 2.0)


def reach(check_id: str, outcome: ReachabilityOutcome) -> list:
    """A reachability check on rank 0's facts with the step's outcome."""
    return run(check_id, [facts(0, "a")], reachability=outcome)


def test_reachability_pair_and_culprit() -> None:
    assert reach("NET007", _outcome(set())) == [] and reach("NET008", _outcome(set())) == []
    pair = _outcome({("b", "d"), ("d", "b")})
    problems = reach("NET007", pair)
    assert len(problems) == 1 and problems[0].message.startswith("b <-> d on ib0")
    assert reach("NET008", pair) == []
    dead = _outcome({(p, "c") for p in "abd"} | {("c", t) for t in "abd"})
    assert [p.hosts for p in reach("NET008", dead)] == [["c"]]
    assert reach("NET007", dead) == []  # the dead host's links are not repeated as pairs


def test_bad_master_addr_and_ifname_input_in_a_real_run(tmp_path) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "29999"}
    done = run_cli(["run", "--skip", "probe"], env={**env, "MASTER_ADDR": "10.0.0.1:29500"})
    assert done.returncode == 2 and "contains a port" in done.stderr and "Traceback" not in done.stderr
    done = run_cli(["run", "--skip", "probe"], env={**env, "MASTER_ADDR": ""})
    assert done.returncode == 3 and "MASTER_ADDR is set but empty" in done.stdout, done.stdout + done.stderr
    report = tmp_path / "r.json"
    done = run_cli(["run", "--skip", "probe", "--timeout", "5", "--json", str(report)],
                   env={**env, "MASTER_ADDR": "no-such-host.invalid", "NCCL_SOCKET_IFNAME": "lo,,"})
    assert "Traceback" not in done.stderr and done.returncode == 3, done.stdout + done.stderr
    assert "NET003" in done.stdout and "NCCL008" in done.stdout  # the empty entry: issue 3's check
    assert base_env()  # the helpers keep launcher variables of the test process out
