"""The history records each host's checkpoint-path rates (--storage) and HIS002 judges a host's storage
against its own past: on a real SQLite history of FAKE runs (tests/helpers/synthetic.history_report
plus a StorageSection), what is tested is the rule and the record, not the measurement."""

from __future__ import annotations

from pathlib import Path

from preflight.checks.history_findings import below_own_history
from preflight.history import judge
from preflight.history.record import figure_rows, write_run
from preflight.history.store import transaction
from preflight.model.storage import StorageHost, StorageSection
from tests.helpers.synthetic import history_report

HOSTS = ["n1", "n2", "n3", "n4"]
NOISE = [1.0, 0.93, 1.06, 0.97, 1.1, 0.9, 1.02, 0.95, 1.08, 0.99]


def _report(name: str, scale: float, slow_write: dict[str, float] | None = None):
    report = history_report(name, HOSTS, mesh="dp2,tp2", link_gbps=40.0 * scale)
    report.storage = StorageSection(path="/ckpt", share_bytes=2**24, hosts=[
        StorageHost(host, ranks=[i], write_gbps=1.0 * scale * (slow_write or {}).get(host, 1.0),
                    read_gbps=2.0 * scale) for i, host in enumerate(HOSTS)])
    return report


def test_a_host_whose_storage_writes_fell_is_named_though_its_links_and_reads_are_healthy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for i in range(10):
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, _report(f"r{i}", NOISE[i]))
    now = _report("now", 1.0, slow_write={"n3": 0.3})
    rows = figure_rows(now.probes, now.probe_devices, now.storage)
    assert {(r.kind, r.subject) for r in rows if r.dim == "storage"} == {
        (kind, host) for kind in ("storage_write", "storage_read") for host in HOSTS}
    with transaction(url, 10.0, write=False) as conn:
        [drop] = judge.drops(conn, rows)[0]
        assert judge.drops(conn, figure_rows(_report("ok", 1.0).probes, [], _report("ok", 1.0).storage))[0] == []
    assert (drop.row.subject, drop.row.kind) == ("n3", "storage_write") and len(drop.past.values) == 10
    [finding] = below_own_history.report(drop)
    assert finding.hosts == ["n3"] and finding.message.startswith("n3: storage write 0.3 GB/s at 16 MiB")
