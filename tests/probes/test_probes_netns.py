"""Four fake hosts (network namespaces, tests/helpers/netns.py), one rank each, over ib0.

One host's ib0 is shaped with tbf to about a tenth of the unshaped rate: its groups are
stragglers and the pairwise round robin, confirmed pair by pair against a known-good host (or
group testing, probes/hosttest.py, when the round robin names nothing), names that host, and
only that host, in each of RUNS runs. Two hosts shaped: the round robin's yardstick is slow
and group testing over real sub-communicators names both, and only them. Unshaped, nothing is flagged over
repeated runs. Both with the default --straggler-ratio (0.8): four ranks share two CPU cores
here, and the straggler rule's spread test and the confirming pass (probes/judge.py,
probes/confirm.py) are what keep scheduler noise from naming anyone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.helpers.netns import FakeNetwork
from tests.helpers.ranks import read_json, spawn_env_ranks, spread

pytestmark = pytest.mark.netns

ARGS = ["--mesh", "dp2,tp2", "--sizes", "256KiB,1MiB", "--warmup", "1", "--iters", "5", "--probe-timeout", "60"]
# The shaped runs need one op at one size (the judgment and the localization use the largest
# size only) and none of the GPU or NIC checks: about a second less per run than ARGS.
SHAPED_ARGS = ["--mesh", "dp2,tp2", "--ops", "all_reduce", "--sizes", "1MiB", "--warmup", "1", "--iters", "5",
               "--probe-timeout", "60", "--skip", "gpu,nic"]
RUNS = 10
LOCALIZING = ("BW003", "BW005", "BW012", "BW013")  # their data says what localization measured and decided


def _run_on_hosts(hosts: FakeNetwork, out: Path, args: list[str] = ARGS) -> dict:
    runs = spawn_env_ranks(len(hosts), [*args, "--json", str(out)], place=spread(hosts, 1),
                           master_addr=hosts[0].address, common_env={"GLOO_SOCKET_IFNAME": "ib0"}, timeout=240)
    assert out.exists(), "\n".join(run.stdout + run.stderr for run in runs.values())
    return read_json(out)


def _why(attempt: int, report: dict) -> str:
    """Every finding but BW008, whole (with the localization's data): a string, so pytest prints it uncut."""
    return json.dumps({"attempt": attempt, "findings": [
        {"id": f["check_id"], "message": f["message"], **({"data": f["data"]} if f["check_id"] in LOCALIZING else {})}
        for f in report["findings"] if f["check_id"] != "BW008"]}, indent=1)


def _ids(report: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for f in report["findings"]:
        found.setdefault(f["check_id"], []).append(f)
    return found


@pytest.mark.timeout(1500)  # RUNS whole runs of four ranks on 2 shared cores; a does-not-hang bound
@pytest.mark.quiet  # bandwidths compared across hosts: the other xdist worker's load made a healthy group slow
def test_shaped_host_is_named_in_every_run_and_no_other_host_is(netns_hosts, tmp_path: Path) -> None:
    hosts: FakeNetwork = netns_hosts(4, prefix="pfv")
    hosts[3].shape("ib0", rate="400mbit", burst="256kb", latency="100ms")
    for attempt in range(RUNS):
        report = _run_on_hosts(hosts, tmp_path / f"shaped-{attempt}.json", SHAPED_ARGS)
        found = _ids(report)
        why = _why(attempt, report)  # whole, with the localization's data: a flake here must say why
        assert all(p["verified"] for p in report["probes"])
        # The shaped host's groups (tp 2,3 and dp 1,3) are the stragglers; under a heavily loaded
        # machine the confirming pass may keep only one of them, never a group without host 3.
        slow_groups = {(f["data"]["dim"], tuple(f["ranks"])) for f in found.get("BW003", [])}
        assert slow_groups and slow_groups <= {("tp", (2, 3)), ("dp", (1, 3))}, why
        # Confirmed: both passes' figures are in the finding.
        assert all(f["data"]["confirm_busbw_gbps"] < 0.8 * f["data"]["confirm_siblings_median_gbps"]
                   for f in found["BW003"])
        # The host named, in every run, and no other: by the round robin (BW005) when both of its
        # groups were confirmed, or, when only one was (then two hosts are known-good), by the round
        # robin or group testing after it (BW012).
        named = found.get("BW005", []) + found.get("BW012", [])
        assert [f["hosts"] for f in named] == [[hosts[3].hostname]], why
        if named[0]["check_id"] == "BW005":
            assert named[0]["data"]["partner"] in (0, 1, 2) and named[0]["data"]["fraction"] < 0.5
            # Judged on the plan's 5 figures against the reference's twice 5, each figure a mean of calls.
            assert named[0]["data"]["false_alarm_p"] == 1 / math.comb(5 + 10, 5)
        else:
            assert max(named[0]["data"]["fractions"]) < 0.5 and hosts[3].hostname not in named[0]["data"]["partners"]
        assert [f["ranks"] for f in found.get("BW004", [])] in ([], [[3]]), why
        assert "BW006" not in found, why
        assert "BW008" in found  # tp groups span hosts here: warned
        # A confirmed straggler below 50% of its siblings is an error (BW004 naming its rank): only
        # the shaped host can be excluded, never another; a slow group (BW003) excludes nobody.
        assert set(report["bad_hosts"]) <= {hosts[3].hostname}, why


# Quiet, as its shaped siblings: "no straggler on healthy hosts" holds for the job's own noise only. Beside
# the other workers a healthy dp group was confirmed slow once in CI (BW003 + BW013, the eighth session's ci9).
@pytest.mark.quiet
def test_unshaped_hosts_have_no_straggler_over_repeated_runs(netns_hosts, tmp_path: Path) -> None:
    hosts: FakeNetwork = netns_hosts(4, prefix="pfv")
    for attempt in range(3):
        report = _run_on_hosts(hosts, tmp_path / f"clean-{attempt}.json")
        found = _ids(report)
        assert len(report["probes"]) == 2 * 2 * 2 * 2 + 2  # (dp, tp) x 2 groups x 2 ops x 2 sizes + world
        assert not {"BW003", "BW004", "BW005", "BW006", "BW012", "BW013"} & set(found), \
            [f["message"] for f in report["findings"]]
        # Groups spanning hosts run over ib0, a veth whose speed (10000 Mb/s) is the nominal rate.
        spanning = [p for p in report["probes"] if len(set(p["hosts"])) > 1]
        assert spanning and all(p["nominal_gbps"] == 1.25 and "ib0" in p["nominal_source"] for p in spanning)


TWO_SHAPED_RUNS = 3


@pytest.mark.timeout(600)  # TWO_SHAPED_RUNS whole runs of four ranks on 2 shared cores; a does-not-hang bound
# Quiet, as the one-shaped test: group testing compares a pool's iterations with a reference pair's
# measured between them, and the other workers' bursts (a run of 8 or 16 ranks starting) slowed the
# reference to the shaped pools' pace once in CI (no host named; 0 in 12 runs at a steady load of 7).
@pytest.mark.quiet
def test_two_shaped_hosts_are_named_by_group_testing_and_no_other_host_is(netns_hosts, tmp_path: Path) -> None:
    # Hosts 3 and 4 (ranks 2 and 3, one tp group) shaped: their tp group is the straggler while both
    # dp groups are equally slow. The round robin over ranks 0-3 then judges every rank against a
    # median that is itself slow and names nobody, so group testing runs over the suspect hosts
    # (3 and 4) with the known-good hosts 1 and 2 as partners, over real sub-communicators.
    # 200 Mbit/s, about 20x slower, not the one-shaped test's 10x: here a single straggler
    # candidate (tp group 1) carries the detection, where the one-shaped test has two (its tp and
    # dp groups), and under heavy load a healthy iteration at 10x could overlap the shaped ones
    # and leave nothing to localize (seen once in about 25 runs, with the machine at load 10-28).
    hosts: FakeNetwork = netns_hosts(4, prefix="pfv")
    for host in (hosts[2], hosts[3]):
        host.shape("ib0", rate="200mbit", burst="256kb", latency="100ms")
    shaped = sorted([hosts[2].hostname, hosts[3].hostname])
    for attempt in range(TWO_SHAPED_RUNS):
        # The last run asks for group testing outright (--localize grouptest): no round robin first.
        direct = attempt == TWO_SHAPED_RUNS - 1
        args = [*SHAPED_ARGS, "--localize", "grouptest"] if direct else SHAPED_ARGS
        report = _run_on_hosts(hosts, tmp_path / f"two-{attempt}.json", args)
        found = _ids(report)
        why = _why(attempt, report)
        assert {(f["data"]["dim"], tuple(f["ranks"])) for f in found.get("BW003", [])} == {("tp", (2, 3))}, why
        # Both shaped hosts named, each slow alone twice against a known-good partner.
        assert sorted(h for f in found.get("BW012", []) for h in f["hosts"]) == shaped, why
        for f in found["BW012"]:
            assert len(f["data"]["fractions"]) == 2 and max(f["data"]["fractions"]) < 0.5, why
            assert set(f["data"]["partners"]) <= {hosts[0].hostname, hosts[1].hostname}, why
        # No other host named by any localization finding.
        named = {h for check in ("BW004", "BW005", "BW006", "BW012") for f in found.get(check, []) for h in f["hosts"]}
        assert named == set(shaped), why
        # The summary says how it was found and what it cost: rounds (two tests and two
        # confirmations at least, plus the round robin's) and seconds, in the data every report
        # format shows; each BW012 carries group testing's own.
        [summary] = found["BW013"]
        assert summary["data"]["method"] == ("grouptest" if direct else "pairwise, then grouptest"), why
        assert ("round_robin_rounds" in summary["data"]) is not direct, why
        assert summary["data"]["named"] == shaped
        assert summary["data"]["suspects"] == shaped
        assert summary["data"]["good"] == [hosts[0].hostname, hosts[1].hostname]
        assert all(f["data"]["rounds"] >= 4 and f["data"]["seconds"] > 0 for f in found["BW012"]), why
        assert summary["data"]["rounds"] >= found["BW012"][0]["data"]["rounds"] and summary["data"]["seconds"] > 0
        assert set(report["bad_hosts"]) <= set(shaped), why  # only a shaped host is ever excluded
