"""Spare nodes: which N hosts of a run to keep, from its JobReport (steps/host_choice.py).

Reports are built by the verdict step itself (tests/helpers/facts.built_report) from findings: host faults written
by hand, slowness written by the real probe checks (their data is what the choice reads), and,
for the raw figures, synthetic ProbeResults (tests/helpers/synthetic.py, a documented fake).
"""

from __future__ import annotations

import pytest

from preflight.checks import localization_findings, probe_findings
from preflight.checks.rank_roster import missing_ranks
from preflight.lib.hostlist import expand_hostlist
from preflight.model import ExitCode, Finding, Severity
from preflight.model.host_choice import SLOW_GROUP
from preflight.model.probe_faults import Confirmed, Straggler
from preflight.registry import JobView, all_checks
from preflight.reports import json as json_report
from preflight.steps.host_choice import choose_hosts, rank_hosts
from tests.helpers.facts import built_report, host_facts
from tests.helpers.synthetic import probe_results


def _bad_ifname(*hosts: str) -> Finding:
    """A value only some hosts have (as NCCL008 reports a bad NCCL_SOCKET_IFNAME): a host fault."""
    return Finding("NCCL008", Severity.ERROR, "NCCL_SOCKET_IFNAME=nosuch0 matches no interface", "fix it",
                   [], list(hosts))


def _slow_host(rank: int, host: str, fraction: float) -> list[Finding]:
    confirmed = Confirmed((rank, 0), fraction, fraction, 1.0, 10.0, 1e-4)
    return localization_findings.slow_host.report(rank=rank, host=host, confirmed=confirmed, partner=0,
                                                  partner_host="n1", median_gbps=8.0)


def _straggler(hosts: list[str], ranks: list[int], busbw: float, siblings: float, group: int = 1) -> list[Finding]:
    return probe_findings.straggler_group.report(
        Straggler(dim="dp", op="all_reduce", size_bytes=1 << 20, group_index=group, ranks=ranks, hosts=hosts,
                  busbw_gbps=busbw, siblings_median_gbps=siblings, confirm_busbw_gbps=busbw,
                  confirm_siblings_median_gbps=siblings), 0.8)


def test_a_failing_host_is_dropped_and_the_rest_kept_in_job_order() -> None:
    report = built_report(host_facts(["n1", "n2", "n3"]), [_bad_ifname("n2")])
    assert report.exit_code == ExitCode.FAILED
    choice = choose_hosts(report, 2)
    assert choice.chosen and choice.kept == ["n1", "n3"]
    assert [(d.host, d.why.split(":")[0]) for d in choice.dropped] == [("n2", "NCCL008")]
    assert "nosuch0" in choice.dropped[0].why and "kept 2 of 3" in choice.why
    # The JobReport carries the same choice (preflight.check callers, renderers).
    assert report.keep_hosts(2) == choice


def test_with_no_finding_the_later_hosts_are_the_spares() -> None:
    report = built_report(host_facts(["n1", "n2", "n3", "n4"]))
    choice = report.keep_hosts(2)
    assert choice.kept == ["n1", "n2"] and [d.host for d in choice.dropped] == ["n4", "n3"]
    assert all("spare, not needed" in d.why for d in choice.dropped)


def test_the_slow_host_named_by_localization_is_dropped_before_others() -> None:
    findings = [*_straggler(["n1", "n2"], [0, 1], busbw=2.0, siblings=8.0), *_slow_host(1, "n2", 0.3)]
    report = built_report(host_facts(["n1", "n2", "n3"]), findings)
    # A group at 25% twice is an error (exit 3), yet a slow group's hosts are where it showed, not
    # its culprits: nothing is blamed (no exclude list), and the choice still drops the slow host.
    assert report.exit_code == ExitCode.FAILED and report.bad_hosts == []
    choice = report.keep_hosts(2)
    assert choice.kept == ["n1", "n3"]
    assert choice.dropped[0].host == "n2" and "BW005" in choice.dropped[0].why and "30%" in choice.dropped[0].why
    # n1 shared the slow group: weaker evidence, so it goes next, before the clean n3.
    assert [h.host for h in report.host_ranking.hosts] == ["n3", "n1", "n2"]


def test_the_host_two_slow_groups_share_is_dropped_though_its_figure_is_not_the_lowest() -> None:
    # As a tbf-shaped first host of a dp2,tp3 job gave them (tests/launchers/test_sbatch_spares.py):
    # dp groups 0 (n1,n2) and 1 (n1,n3) confirmed slow, n2's group a hair slower than n1's other.
    findings = [*_straggler(["n1", "n2"], [0, 3], busbw=0.0239, siblings=0.172, group=0),
                *_straggler(["n1", "n3"], [1, 4], busbw=0.0241, siblings=0.172, group=1)]
    report = built_report(host_facts(["n1", "n2", "n3"], per_host=2), findings)
    choice = report.keep_hosts(2)
    assert choice.kept == ["n2", "n3"] and choice.dropped[0].host == "n1"
    assert choice.dropped[0].why.count("BW003") == 2
    assert {h.host: h.slow_counts[SLOW_GROUP] for h in report.host_ranking.hosts} == {"n1": 2, "n2": 1, "n3": 1}


def test_of_a_slow_links_two_ends_the_one_with_more_evidence_below_goes() -> None:
    # Both ends of one slow link are equally suspect at that level; n1, the earlier in the job (the
    # tie-break would keep it), is also in two slow groups.
    link = localization_findings.slow_link.report(ranks=[0, 1], hosts=["n1", "n2"],
                                                  confirmed=Confirmed((0, 1), 0.2, 0.2, 1.0, 5.0, 1e-4))
    findings = [*link, *_straggler(["n1", "n3"], [0, 2], busbw=1.0, siblings=8.0, group=0),
                *_straggler(["n1", "n4"], [0, 3], busbw=1.0, siblings=8.0, group=1)]
    report = built_report(host_facts(["n1", "n2", "n3", "n4"]), findings)
    assert report.keep_hosts(3).dropped[0].host == "n1" and "BW006" in report.keep_hosts(3).dropped[0].why
    assert [h.host for h in report.host_ranking.hosts][-2:] == ["n2", "n1"]


def test_slowness_is_read_from_data_whatever_the_severity() -> None:
    # A straggler reported as an error (a stricter severity policy) names some hosts: a host fault.
    findings = [Finding(f.check_id, Severity.ERROR, f.message, f.hint, f.ranks, f.hosts, f.data)
                for f in _slow_host(2, "n3", 0.4)]
    report = built_report(host_facts(["n1", "n2", "n3"]), findings)
    assert report.keep_hosts(2).kept == ["n1", "n2"]
    standing = {h.host: h for h in report.host_ranking.hosts}["n3"]
    assert standing.faults and standing.slow_fraction == pytest.approx(0.4)


def test_failing_before_slow_and_slowest_figure_first() -> None:
    findings = [_bad_ifname("n4"), *_slow_host(1, "n2", 0.5), *_slow_host(2, "n3", 0.2)]
    report = built_report(host_facts(["n1", "n2", "n3", "n4", "n5"]), findings)
    assert report.keep_hosts(3).kept == ["n1", "n2", "n5"]
    assert [d.host for d in report.keep_hosts(3).dropped] == ["n4", "n3"]
    assert [d.host for d in report.keep_hosts(2).dropped] == ["n4", "n3", "n2"]


def test_fewer_healthy_hosts_than_wanted_is_no_choice() -> None:
    report = built_report(host_facts(["n1", "n2", "n3"]), [_bad_ifname("n1", "n2")])
    choice = report.keep_hosts(2)
    assert not choice.chosen and choice.kept == []
    assert "1 healthy host(s) of 3, 2 needed" in choice.why
    assert sorted(d.host for d in choice.dropped) == ["n1", "n2"]


def test_an_error_every_host_shares_never_picks_hosts() -> None:
    report = built_report(host_facts(["n1", "n2", "n3"]), [_bad_ifname("n1", "n2", "n3")])
    choice = report.keep_hosts(1)
    assert not choice.chosen and "every host shares" in choice.why and "NCCL008" in choice.why
    # ... even beside a host fault: leaving the faulty host out would not fix the job.
    both = built_report(host_facts(["n1", "n2", "n3"]), [_bad_ifname("n2"), Finding("ENV001", Severity.ERROR, "no", "",
                                                                              [], [])])
    assert not both.keep_hosts(1).chosen and "ENV001" in both.keep_hosts(1).why


def test_an_incomplete_run_proves_nothing() -> None:
    report = built_report(host_facts(["n1", "n2"]), [Finding("RUN005", Severity.COULD_NOT_RUN, "gatherer died", "",
                                                    [], ["n2"])])
    assert report.exit_code == ExitCode.INCOMPLETE
    assert not report.keep_hosts(1).chosen and "incomplete" in report.keep_hosts(1).why


def test_a_missing_rank_blames_its_host_which_is_dropped() -> None:
    facts = host_facts(["n1", "n2", "n3"], per_host=2)
    expected = {r: f.host for r, f in enumerate(facts)}
    for f in facts:
        f.world.expected_hosts = dict(expected)
    job = JobView(world_size=6, ranks=facts[:4] + facts[5:])
    report = built_report(facts[:4] + facts[5:], _run(missing_ranks, job), missing=[4])
    assert report.bad_hosts == ["n3"]
    choice = report.keep_hosts(2)
    assert choice.chosen and choice.kept == ["n1", "n2"] and choice.dropped[0].host == "n3"


def _run(check, job: JobView) -> list[Finding]:
    spec = next(s for s in all_checks() if s.func is check)
    return [spec.finding(p) for p in spec.func(job)]


def test_measured_figures_order_hosts_no_finding_names() -> None:
    hosts = ["n1", "n2", "n3", "n4"]
    probes = probe_results("dp2,tp2", {r: h for r, h in enumerate(hosts)}, slow_hosts={"n1": 0.9})
    report = built_report(host_facts(hosts), probes=probes)
    # n1 sits in the slower groups of both dimensions: the spare, though it is first in the job.
    choice = report.keep_hosts(3)
    assert choice.dropped[0].host == "n1" and "no finding" in choice.dropped[0].why
    assert choice.kept == ["n2", "n3", "n4"]


def test_shared_host_names_are_kept_or_dropped_whole() -> None:
    facts = host_facts(["vm", "vm", "n3"], per_host=2, node_rank_given=True)
    report = built_report(facts, [*_slow_host(0, "vm", 0.3)])
    choice = report.keep_hosts(1)
    assert choice.kept == ["n3"] and [d.host for d in choice.dropped] == ["vm"]
    assert choice.notes and "shared by 2 nodes" in choice.notes[0]
    assert {h.host: h.nodes for h in report.host_ranking.hosts} == {"n3": 1, "vm": 2}


def test_slurm_hostlist_hosts_in_job_order_and_json_round_trip(tmp_path) -> None:
    hosts = expand_hostlist("gpu[008-012],gpu100")
    report = built_report(host_facts(hosts, per_host=2), [_bad_ifname("gpu010")])
    choice = report.keep_hosts(4)
    assert choice.kept == ["gpu008", "gpu009", "gpu011", "gpu012"]
    assert [d.host for d in choice.dropped] == ["gpu010", "gpu100"]
    path = tmp_path / "r.json"
    json_report.write(report, str(path))
    again = json_report.load(path)
    assert again.host_ranking == report.host_ranking and again.keep_hosts(4) == choice


def test_keep_must_be_positive_and_ranking_is_pure() -> None:
    report = built_report(host_facts(["n1", "n2"]))
    with pytest.raises(ValueError):
        report.keep_hosts(0)
    assert rank_hosts(report) == rank_hosts(report) == report.host_ranking
    assert not report.keep_hosts(3).chosen  # more than there are


def test_a_slow_device_and_a_drop_below_its_own_history_each_drop_their_host() -> None:
    from preflight.checks import device_probe, history_findings
    from preflight.model.device_probe import DeviceRow, Slow
    from preflight.model.history_records import Drop, FigureRow, OwnPast

    row = DeviceRow(rank=2, host="n3", kind="cuda", name="NVIDIA H100 80GB HBM3", index=0, uuid="GPU-3")
    slow = device_probe.matrix_slow.report(Slow(row, "gemm_bf16", "TFLOP/s", 300.0, 780.0, [300.0, 305.0],
                                                 [780.0, 781.0], 3, 0.85))
    figure = FigureRow("collective", "n2", 40.0, "GB/s", host="n2", dim="dp", op="all_reduce", size_bytes=1 << 28)
    drop = history_findings.below_own_history.report(Drop(figure, OwnPast("n2", figure.key, [90.0] * 10), 0.25))
    report = built_report(host_facts(["n1", "n2", "n3", "n4"]), [*slow, *drop])
    choice = report.keep_hosts(2)
    assert choice.kept == ["n1", "n4"]
    assert [d.host for d in choice.dropped] == ["n3", "n2"]  # the device, confirmed in this job, goes first
    assert "DEV003" in choice.dropped[0].why and "38%" in choice.dropped[0].why
    assert "HIS002" in choice.dropped[1].why and "44% of its median" in choice.dropped[1].why


def test_no_choice_reason_is_never_cut_between_a_figure_and_its_unit() -> None:
    """The NO CHOICE line quotes the error every host shares, clipped between words: `0.0789 GB`
    whole or not at all (it was cut to `0.0789 G`)."""
    from preflight.steps.host_choice import blocked_reason

    for pad in range(150, 200):
        message = "x" * pad + " copied 0.0789 GB in 0.2 s on every host"
        shared = Finding("ENV001", Severity.ERROR, message, hosts=["n1", "n2", "n3"])
        reason = blocked_reason(built_report(host_facts(["n1", "n2", "n3"]), [shared]))
        assert reason.startswith("an error every host shares"), reason
        assert "0.0789" not in reason or "0.0789 GB" in reason, (pad, reason[-40:])
        assert not reason.rstrip(" …").endswith(("0.0789 G", "0.0789"))


def test_a_slow_checkpoint_path_drops_its_host() -> None:
    from preflight.checks import storage
    from preflight.model.storage import SlowStorage

    found = storage.slow_storage.report(SlowStorage("n2", "write", [0.1, 0.12], [1.0, 1.2], 0.5))
    report = built_report(host_facts(["n1", "n2", "n3"]), found)
    assert report.exit_code == ExitCode.PASSED and report.bad_hosts == []  # a warning: nobody is blamed
    choice = report.keep_hosts(2)
    assert choice.kept == ["n1", "n3"]
    assert choice.dropped[0].host == "n2" and "STO007" in choice.dropped[0].why and "10%" in choice.dropped[0].why
