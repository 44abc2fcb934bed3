"""Not applicable is not a pass: a real CPU run (`preflight launch -n 2 --backend gloo`) reports
the GPU checks skipped, with the reason, in every format: JSON, JUnit, plain text and HTML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.helpers.ranks import read_json, run_cli


def test_a_clean_cpu_run_reports_every_gpu_check_skipped_with_the_reason(tmp_path: Path) -> None:
    paths = {kind: tmp_path / f"report.{kind}" for kind in ("json", "xml", "html")}
    proc = run_cli(["launch", "-n", "2", "--backend", "gloo", "--skip", "probe", "--json", str(paths["json"]),
                    "--junit", str(paths["xml"]), "--html", str(paths["html"])], timeout=180)
    assert paths["json"].exists(), proc.stdout + proc.stderr
    report = read_json(paths["json"])
    assert "--verdict-file" not in report["meta"]["command_line"]  # launch's internal channel is not shown
    assert "--verdict-file" not in paths["html"].read_text()
    gpu = {c["check_id"]: c for c in report["checks"] if c["tag"] == "gpu"}
    assert len(gpu) >= 20
    cases = {case.get("name").split(":")[0]: case for case in ET.parse(paths["xml"]).getroot().iter("testcase")}
    if any(r["health"]["nvml"] == "ok" for r in report["ranks"]):  # a machine with a driver: they ran
        assert not [c for c in gpu.values() if c["status"] == "skipped"]
        return
    # No NVIDIA driver here: every GPU check did not apply. None of them is a pass.
    assert {c["status"] for c in gpu.values()} == {"skipped"}, gpu
    # A host without InfiniBand / RoCE ports skips the port checks too, with its own reason.
    if not any(r["network"]["ib_ports"] for r in report["ranks"]):
        nic = [c for c in report["checks"] if c["tag"] == "nic"]
        assert {(c["status"], c["reason"]) for c in nic} == {("skipped", "no RDMA port")}, nic
    assert {c["reason"] for c in gpu.values()} == {"no NVIDIA driver"}
    for check_id in gpu:
        skipped = cases[check_id].find("skipped")
        assert skipped is not None and "no NVIDIA driver" in skipped.get("message"), check_id
    suite = ET.parse(paths["xml"]).getroot().find("testsuite")
    assert int(suite.get("skipped")) >= len(gpu)
    # Checks that applied and found nothing still pass: no skipped, no failure element.
    passed = [c["check_id"] for c in report["checks"] if c["status"] in ("ok", "info")]
    assert passed and all(cases[c].find("skipped") is None and cases[c].find("failure") is None for c in passed)
    # The person reading the terminal or the HTML sees the same count, with the reasons.
    skipped = [c for c in report["checks"] if c["status"] == "skipped"]
    summary = f"{len(passed)} passed, {len(skipped)} skipped ("
    assert summary in proc.stdout and f"{len(gpu)} no NVIDIA driver" in proc.stdout, proc.stdout
    assert "every check that applied passed" in report["why"] and "no NVIDIA driver" in report["why"]
    page = paths["html"].read_text()
    assert summary in page and f"{len(gpu)} no NVIDIA driver" in page
