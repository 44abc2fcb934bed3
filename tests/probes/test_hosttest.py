"""preflight/probes/hosttest.py's decisions: which hosts are suspects and known-good, when group
testing runs instead of (or after) the round robin, and how a pool's figures are judged.

The rounds themselves run over real sub-communicators in tests/probes/test_probes_netns.py
(two hosts shaped with tbf, named by group testing).
"""

from __future__ import annotations

from preflight.probes import hosttest


def _sets(suspects: int, good: int, per_host: int = 1) -> hosttest.HostSets:
    hosts = {r: f"n{r // per_host}" for r in range((suspects + good) * per_host)}
    slow = {r for r in hosts if r // per_host >= good}
    return hosttest.host_sets(slow, hosts, len(hosts))


def test_suspects_are_the_hosts_of_slow_ranks_and_the_rest_are_known_good_in_rank_order() -> None:
    hosts = {0: "b", 1: "b", 2: "a", 3: "a", 4: "c", 5: "c"}
    sets = hosttest.host_sets({3, 4}, hosts, 6)
    assert sets.suspects == ["a", "c"] and sets.good == ["b"]
    assert sets.ranks == {"b": [0, 1], "a": [2, 3], "c": [4, 5]}
    # A rank whose host is unknown is its own host, never merged with another.
    assert hosttest.host_sets({1}, {}, 2).suspects == ["rank1"]


def test_a_small_job_keeps_the_round_robin_and_a_long_one_goes_to_group_testing() -> None:
    # 2 suspect hosts, 2 known-good, 1 rank each: 3 rounds of round robin, under group testing's 4.
    assert hosttest.choose(_sets(2, 2), pairwise_ranks=4) == "pairwise"
    # 4 suspect hosts of 8 ranks plus a healthy sibling's: 63 rounds against 6.
    assert hosttest.choose(_sets(4, 4, per_host=8), pairwise_ranks=64) == "grouptest"
    assert hosttest.rounds_bound(4) == 6 and hosttest.rounds_bound(512) == 20


def test_group_testing_needs_two_suspect_hosts_and_a_known_good_pair() -> None:
    assert not hosttest.possible(_sets(1, 5))  # one suspect host: intra-host, the round robin's job
    assert not hosttest.possible(_sets(5, 1))  # one known-good host: no reference pair
    assert hosttest.possible(_sets(2, 2))
    assert hosttest.choose(_sets(8, 1, per_host=8), pairwise_ranks=64) == "pairwise"


def test_the_round_robin_is_not_trusted_when_its_median_pair_is_slow() -> None:
    fast, slow = 1.0, 0.1
    # Ranks 2 and 3 slow, 0 and 1 known-good: five of six pairs are slow, so is their median.
    two_bad = {(0, 1): fast, (0, 2): slow, (0, 3): slow, (1, 2): slow, (1, 3): slow, (2, 3): slow}
    assert not hosttest.round_robin_trusted(two_bad, {0, 1}, 0.8)
    # Only rank 3 slow: the median pair is a fast one.
    one_bad = {(0, 1): fast, (0, 2): fast, (1, 2): fast, (0, 3): slow, (1, 3): slow, (2, 3): slow}
    assert hosttest.round_robin_trusted(one_bad, {0, 1}, 0.8)
    assert hosttest.round_robin_trusted(two_bad, {0}, 0.8)  # no known-good pair: nothing to compare with


def test_a_pool_is_bounded_by_its_slowest_member_and_slow_only_when_every_iteration_is_below_the_ratio() -> None:
    # all_reduce on 2 ranks moves 1 x the buffer per rank (bus factor 1): 1 MB in 1 ms is 1 GB/s.
    figures = hosttest.pool_gbps([[0.001, 0.002], [0.002, 0.001]], 1_000_000)
    assert figures == [0.5, 0.5]
    assert hosttest.pool_gbps([[0.001], []], 1_000_000) == []  # a silent member: no figure
    reference = [1.0, 1.1, 0.9, 1.0, 0.05]  # one stalled iteration does not move the median
    assert hosttest.is_slow([0.1, 0.12, 0.11], reference, 0.8)
    # Median well below, but one iteration as fast as 0.8 x the reference's median: noise may explain it.
    assert not hosttest.is_slow([0.1, 0.12, 0.85], reference, 0.8)
    assert not hosttest.is_slow([0.85, 0.86, 0.84], reference, 0.8)
    assert not hosttest.is_slow([], reference, 0.8)


def test_the_rounds_and_seconds_are_in_the_findings_data_and_every_report_format() -> None:
    import json

    from preflight.checks.localization_findings import localization_summary, slow_host_group_tested
    from preflight.model import JobReport, ReportMeta
    from preflight.reports import html, text
    from preflight.reports.json import dumps

    findings = slow_host_group_tested.report(host="n3", ranks=[2], fractions=[0.1, 0.12], partners=["n0", "n1"],
                                             reference_gbps=1.0, rounds=5, seconds=0.64)
    findings += localization_summary.report(method="grouptest", suspects=["n2", "n3"], good=["n0", "n1"], rounds=5,
                                            tests=5, seconds=0.64, named=["n3"])
    assert [f.check_id for f in findings] == ["BW012", "BW013"]
    assert findings[0].blames_host and findings[0].data["rounds"] == 5 and findings[0].data["seconds"] == 0.64
    assert findings[1].data["method"] == "grouptest" and findings[1].data["rounds"] == 5
    report = JobReport(meta=ReportMeta("env", "", "r", 4, 4, "n0", 29500), findings=findings)
    for rendered in (text.render(report), html.render(report)):
        assert "5 rounds" in rendered and "0.6 s" in rendered and "named n3" in rendered
    written = json.loads(dumps(report))["findings"]
    assert written[1]["data"]["rounds"] == 5 and written[1]["data"]["seconds"] == 0.64


def test_localize_pairwise_never_group_tests_and_grouptest_does_whenever_it_can() -> None:
    assert hosttest.choose(_sets(4, 4, per_host=8), pairwise_ranks=64, mode="pairwise") == "pairwise"
    assert hosttest.choose(_sets(2, 2), pairwise_ranks=4, mode="grouptest") == "grouptest"
    assert hosttest.choose(_sets(2, 1), pairwise_ranks=4, mode="grouptest") == "pairwise"  # no reference pair


def test_a_bad_localize_value_is_one_clear_line() -> None:
    import pytest

    from preflight.lib.errors import BadInput
    from preflight.options import RunOptions

    with pytest.raises(BadInput, match="--localize 'binary'"):
        RunOptions.build(localize="binary")
