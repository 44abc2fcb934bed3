"""--metrics in a real run, scraped by a real node_exporter (Debian's prometheus-node-exporter,
tests/helpers/node_exporter.py) over HTTP on loopback, and parsed back with prometheus-client's
own parser: every labelled probe figure of the JSON report is there, with its value."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.ranks import read_json, run_cli


def test_metrics_file_is_scraped_by_node_exporter_with_every_labelled_figure(tmp_path: Path, node_exporter) -> None:
    folder = tmp_path / "textfiles"
    folder.mkdir()
    exporter = node_exporter(folder)
    report_path = tmp_path / "report.json"
    done = run_cli(["launch", "-n", "2", "--ops", "all_reduce,all_gather", "--sizes", "64KiB,256KiB", "--iters", "3",
                    "--skip", "gpu,nic", "--json", str(report_path), "--quiet",
                    "--metrics", str(folder / "preflight.prom")], timeout=240)
    assert report_path.exists(), done.stderr[-2000:]
    report = read_json(report_path)
    assert not [f for f in report["findings"] if f["check_id"] == "HIS004"]
    assert sorted(p.name for p in folder.iterdir()) == ["preflight.prom"]  # the temporary file renamed away

    families = {f.name: f for f in text_string_to_metric_families(exporter.scrape())}
    # node_exporter read the file without complaint.
    assert [s.value for s in families["node_textfile_scrape_error"].samples] == [0.0]
    labels = ("host", "rank", "dimension", "op", "size_bytes")
    busbw = {tuple(s.labels[name] for name in labels): s.value
             for s in families["preflight_collective_busbw_bytes_per_second"].samples}
    expected = {(host, str(rank), p["dim"], p["op"], str(p["size_bytes"])): p["busbw_gbps"] * 1e9
                for p in report["probes"] for rank, host in zip(p["ranks"], p["hosts"])}
    assert busbw.keys() == expected.keys() and len(expected) == 2 * 2 * 2  # ranks x ops x sizes
    for key, value in expected.items():
        assert abs(busbw[key] - value) <= 1e-6 * value, key
    assert all("gpu" in s.labels for s in families["preflight_collective_busbw_bytes_per_second"].samples)
    assert [s.value for s in families["preflight_run_exit_code"].samples] == [float(report["exit_code"])]
    [info] = families["preflight_run_info"].samples
    assert info.labels["verdict"] == report["verdict"] and info.labels["run_id"] == report["meta"]["run_id"]
    hosts = {s.labels["host"]: s.value for s in families["preflight_host_excluded"].samples}
    assert hosts == {h: 0.0 for p in report["probes"] for h in p["hosts"]}
