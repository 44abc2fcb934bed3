"""The own-past rule and the flaky rule on a real SQLite history of FAKE runs
(tests/helpers/synthetic.history_report): what is tested is the rule, not the probes."""

from __future__ import annotations

from pathlib import Path

from preflight.checks.history_findings import below_own_history
from preflight.history import judge
from preflight.history.record import figure_rows, write_run
from preflight.history.store import transaction
from tests.helpers.synthetic import history_report

HOSTS = ["n1", "n2", "n3", "n4"]
NOISE = [1.0, 0.93, 1.06, 0.97, 1.1, 0.9, 1.02, 0.95, 1.08, 0.99]  # +-10%: a healthy host's run-to-run spread


def _seed(url: str, runs: int, *, bad: dict[int, list[str]] | None = None) -> None:
    for i in range(runs):
        report = history_report(f"r{i}", HOSTS, mesh="dp2,tp2", link_gbps=40.0 * NOISE[i % len(NOISE)],
                                bad_hosts=(bad or {}).get(i, []))
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, report)


def _drops(url: str, slow: dict[str, float]) -> list[judge.Drop]:
    now = history_report("now", HOSTS, mesh="dp2,tp2", link_gbps=40.0, slow_hosts=slow)
    with transaction(url, 10.0, write=False) as conn:
        return judge.drops(conn, figure_rows(now.probes, now.probe_devices))[0]


def test_a_host_below_its_own_past_is_named_with_what_changed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _seed(url, 10)
    # n4 at half speed: its tp group (n3, n4) and dp group (n2, n4) are slow. n2 and n3 each also
    # sit in a healthy group, and are judged on their best figure: only n4 is named.
    found = _drops(url, {"n4": 0.5})
    assert {d.row.subject for d in found} == {"n4"}
    assert {(d.row.dim, d.row.op) for d in found} == {("dp", "all_reduce"), ("tp", "all_reduce")}
    for drop in found:
        assert drop.row.size_bytes == 1 << 26  # the largest size only
        assert len(drop.past.values) == 10 and drop.row.value < drop.threshold
        [finding] = below_own_history.report(drop)
        assert finding.hosts == ["n4"] and "its last 10 runs' median" in finding.message
        assert f"{drop.row.value / drop.past.median:.0%}" in finding.message


def test_within_its_noise_nothing_is_named(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _seed(url, 10)
    assert _drops(url, {}) == []
    assert _drops(url, {"n4": 0.8}) == []  # 20% below the median is within 0.75 x its p10 (0.9)


def test_a_young_history_does_not_judge(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _seed(url, judge.MIN_RUNS - 1)
    assert _drops(url, {"n4": 0.2}) == []


def test_runs_a_host_failed_are_not_its_healthy_record(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _seed(url, 8, bad={i: ["n4"] for i in range(4)})  # n4 failed in 4 runs: 4 healthy ones remain
    assert _drops(url, {"n4": 0.2}) == []
    _seed(url, 1)
    found = _drops(url, {"n4": 0.2})
    assert {d.row.subject for d in found} == {"n4"} and all(len(d.past.values) == 5 for d in found)


def test_flaky_counts_failures_in_the_last_n_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _seed(url, 12, bad={0: ["n1"], 1: ["n1"], 2: ["n1"], 5: ["n2"], 9: ["n2"], 11: ["n2"], 10: ["n3"]})
    with transaction(url, 10.0, write=False) as conn:
        flaky = judge.flaky_hosts(conn, HOSTS, 3, 10)  # n1's failures are older than its last 10 runs
        assert [(f.host, f.failed, f.runs) for f in flaky] == [("n2", 3, 10)]
        assert [f.host for f in judge.all_flaky(conn, 1, 3)] == ["n2", "n3"]


def test_a_collective_is_judged_per_host_not_once_per_gpu(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for i in range(6):  # NCCL runs: every figure also recorded under each rank's GPU UUID
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, history_report(f"g{i}", HOSTS, mesh="dp2,tp2", link_gbps=40.0 * NOISE[i], gpus=True))
    now = history_report("now", HOSTS, mesh="dp2,tp2", link_gbps=40.0, slow_hosts={"n4": 0.3}, gpus=True)
    rows = figure_rows(now.probes, now.probe_devices)
    assert any(r.gpu_uuid == "GPU-n4-3" for r in rows)  # the GPU's record is kept ...
    with transaction(url, 10.0, write=False) as conn:
        found = judge.drops(conn, rows)[0]
    assert {d.row.subject for d in found} == {"n4"}  # ... but the group's figure is judged once, per host
