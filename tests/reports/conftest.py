"""One real 4-rank run with planted faults, shared by the report tests (it costs a few seconds).

Planted from the test side only:
- host names node01..node04, one rank per host (tests/helpers/hosts.py: each rank in its own
  UTS and mount namespaces; a real env:// run over a real c10d store);
- rank 3: TORCH_NCCL_ASYNC_ERROR_HANDLING=0, a bad value (NCCL001, an error on node04 only);
- rank 2: NCCL_DEBUG=INFO where the others have WARN, a drifting variable;
- ranks 1 and 2: PREFLIGHT_TEST_NOTE holding `<img onerror>` and `<script>` markup, which
  the HTML must show as text and never execute.
The run fails (exit 3), so its probes never start. `probed` re-renders the run's own JSON
through `preflight report` after adding made-up ProbeResults (tests/helpers/synthetic.py,
a documented fake) for a dp2,tp2 mesh in which node04 is slow: the charts need a probe table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from preflight.model import JobReport
from preflight.reports.json import dumps
from preflight.reports.json import load as load_report
from tests.helpers.hosts import fake_host
from tests.helpers.ranks import RankRun, run_cli, spawn_env_ranks, spread
from tests.helpers.synthetic import probe_results

IMG_PAYLOAD = '<img src=x onerror="window.__pwned=1">'
SCRIPT_PAYLOAD = "<script>window.__pwned=2</script>"


@dataclass
class PlantedRun:
    """Paths of everything the real run and its re-render wrote."""

    folder: Path
    ranks: dict[int, RankRun]
    json: Path
    html: Path
    junit: Path
    text: Path
    exclude: Path
    probed_json: Path
    probed_html: Path
    probed_junit: Path
    rerender_code: int
    rerender_stdout: str

    def report(self) -> JobReport:
        """The JobReport the run wrote."""
        return load_report(str(self.json))


@pytest.fixture(scope="session")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> PlantedRun:
    """Run 4 real ranks with the faults above, then re-render with a probe table."""
    folder = tmp_path_factory.mktemp("planted")
    paths = {name: folder / f"run.{ext}" for name, ext in
             (("json", "json"), ("html", "html"), ("junit", "xml"), ("text", "txt"), ("exclude", "exclude"))}
    args = ["--timeout", "60", "--json", str(paths["json"]), "--html", str(paths["html"]),
            "--junit", str(paths["junit"]), "--text", str(paths["text"]), "--exclude-file", str(paths["exclude"])]
    hosts = [fake_host(folder, f"node{i:02d}") for i in range(1, 5)]
    ranks = spawn_env_ranks(
        4, args,
        place=spread(hosts, 1, host_env={1: {"PREFLIGHT_TEST_NOTE": IMG_PAYLOAD},
                                         2: {"NCCL_DEBUG": "INFO", "PREFLIGHT_TEST_NOTE": SCRIPT_PAYLOAD},
                                         3: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}}),
        common_env={"NCCL_DEBUG": "WARN"},
        timeout=180,
    )
    assert paths["json"].exists(), f"rank 0 wrote no JSON: {ranks[0].stdout}\n{ranks[0].stderr}"
    report = load_report(str(paths["json"]))
    hosts = {facts.rank: facts.host for facts in report.ranks}
    report.meta.mesh = "dp2,tp2"
    report.probes = probe_results("dp2,tp2", hosts, link_gbps={"dp": 8.0, "tp": 20.0}, slow_hosts={"node04": 0.3})
    probed_json = folder / "probed.json"
    probed_json.write_text(dumps(report))
    probed_html, probed_junit = folder / "probed.html", folder / "probed.xml"
    rerender = run_cli(["report", str(probed_json), "--html", str(probed_html), "--junit", str(probed_junit)])
    return PlantedRun(folder, ranks, probed_json=probed_json, probed_html=probed_html, probed_junit=probed_junit,
                      rerender_code=rerender.returncode, rerender_stdout=rerender.stdout + rerender.stderr, **paths)
