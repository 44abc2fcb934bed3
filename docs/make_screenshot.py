"""Make docs/report.png: the HTML report of a real 8-rank run with planted faults, in chromium.

    .venv/bin/python docs/make_screenshot.py [--out docs/report.png] [--keep DIR]

1. Runs `preflight run` as 8 real env:// ranks on this machine (gloo, c10d store), with
   faults planted in their environments: rank 5 sets TORCH_NCCL_ASYNC_ERROR_HANDLING=0,
   rank 6 has NCCL_DEBUG=INFO where the others have WARN. Each pair of ranks reports a host
   name node01..node04 (a sitecustomize hook replaces socket.gethostname: a documented fake,
   so that one machine shows a multi-host layout).
2. That run fails (exit 3), so its probes never start. Until the probes exist, the script adds
   made-up ProbeResults for a dp2,tp4 mesh in which node03 is slow (tests/helpers/synthetic.py,
   a documented fake) and re-renders the run's JSON with `preflight report --html`; when the
   run did measure probes, they are kept as they are.
3. Opens the HTML in headless chromium (selenium + chromedriver) and saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from preflight.model import JobReport  # noqa: E402
from tests.helpers.browser import (  # noqa: E402
    chromium_driver,
    console_errors,
    find_chromium,
    full_page_screenshot,
    wait_ready,
)
from tests.helpers.hosts import fake_hostnames_env  # noqa: E402
from tests.helpers.ranks import run_cli, spawn_env_ranks  # noqa: E402
from tests.helpers.synthetic import probe_results  # noqa: E402


def make(out: Path, folder: Path) -> None:
    """Run, re-render, screenshot."""
    run_json, html = folder / "run.json", folder / "report.html"
    ranks = spawn_env_ranks(
        8, ["--timeout", "60", "--json", str(run_json), "--quiet"],
        common_env={**fake_hostnames_env(folder, per_host=2), "NCCL_DEBUG": "WARN"},
        rank_env={5: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, 6: {"NCCL_DEBUG": "INFO"}},
        timeout=180,
    )
    if not run_json.exists():
        raise SystemExit(f"the run wrote no report: {ranks[0].stderr}")
    report = JobReport.from_dict(json.loads(run_json.read_text()))
    if not report.probes:
        report.meta.mesh = "dp2,tp4"
        hosts = {facts.rank: facts.host for facts in report.ranks}
        report.probes = probe_results("dp2,tp4", hosts, link_gbps={"dp": 8.0, "tp": 20.0},
                                      slow_hosts={"node03": 0.35})
        run_json.write_text(json.dumps(report.to_dict()))
    rendered = run_cli(["report", str(run_json), "--html", str(html)])
    if not html.exists():
        raise SystemExit(f"preflight report failed: {rendered.stderr}")
    chromium, chromedriver = find_chromium(), shutil.which("chromedriver")
    if not chromium or not chromedriver:
        raise SystemExit("needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    with chromium_driver(chromium, chromedriver) as driver:
        driver.get(html.as_uri())
        wait_ready(driver)
        errors = console_errors(driver)
        if errors:
            raise SystemExit(f"browser console errors: {errors}")
        out.parent.mkdir(parents=True, exist_ok=True)
        full_page_screenshot(driver, str(out), width=1400)
    print(f"{out}: run exit {ranks[0].returncode}, report {html}")


def main() -> None:
    """Parse the two options and make the screenshot."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--keep", type=Path, help="keep the run's JSON and HTML in this folder")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        make(args.out, args.keep)
    else:
        with tempfile.TemporaryDirectory() as folder:
            make(args.out, Path(folder))


if __name__ == "__main__":
    main()
