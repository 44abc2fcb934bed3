"""Make docs/report.png: the HTML report of a real 8-rank run with planted faults, in chromium.

    .venv/bin/python docs/make_screenshot.py [--out docs/report.png] [--keep DIR]

1. Runs `preflight run --mesh dp2,tp4` as 8 real env:// ranks on this machine (gloo, c10d
   store, real process groups and probes), ranks 0-3 on fake host node01 and ranks 4-7 on
   node02 (tests/helpers/hosts.py: UTS and mount namespaces, so root or unprivileged user
   namespaces), with faults planted from outside preflight (tests/helpers/ranks.plant_env,
   a `sitecustomize.py` on PYTHONPATH):
   - rank 5 negates its all_to_all input (a corrupting rank: BW001, an error naming it);
   - rank 2 sleeps 30 ms in every all_reduce (a slow rank: its groups are stragglers);
   - rank 6 has NCCL_DEBUG=INFO where the others have WARN (environment drift).
2. Renders the HTML (`--html`), opens it in headless chromium (selenium + chromedriver) and
   saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from preflight.reports.json import load as load_report  # noqa: E402
from tests.helpers.browser import (  # noqa: E402
    chromium_driver,
    console_errors,
    find_chromium,
    full_page_screenshot,
    wait_ready,
)
from tests.helpers.hosts import fake_host  # noqa: E402
from tests.helpers.ranks import Placement, plant_env, spawn_env_ranks, spread  # noqa: E402

PLANTS = {
    2: """
        import time, torch.distributed as dist
        _real_all_reduce = dist.all_reduce
        def _slow_all_reduce(*args, **kwargs):
            time.sleep(0.03)
            return _real_all_reduce(*args, **kwargs)
        dist.all_reduce = _slow_all_reduce
    """,
    5: """
        import torch.distributed as dist
        _real_a2a = dist.all_to_all_single
        def _corrupt_a2a(output, input, *args, **kwargs):
            input.mul_(-1)
            return _real_a2a(output, input, *args, **kwargs)
        dist.all_to_all_single = _corrupt_a2a
    """,
}


def make(out: Path, folder: Path) -> None:
    """Run with the planted faults, render, screenshot."""
    run_json, html = folder / "run.json", folder / "report.html"
    on_hosts = spread([fake_host(folder, "node01"), fake_host(folder, "node02")], 4)

    def place(rank: int) -> Placement:
        placed = on_hosts(rank)
        return Placement(placed.host, {**placed.env, "NCCL_DEBUG": "INFO"}) if rank == 6 else placed

    ranks = spawn_env_ranks(
        8, ["--timeout", "60", "--mesh", "dp2,tp4", "--sizes", "256KiB,1MiB,4MiB", "--iters", "5",
            "--json", str(run_json), "--html", str(html), "--quiet"],
        place=place, common_env={**plant_env(folder, PLANTS), "NCCL_DEBUG": "WARN"},
        timeout=240,
    )
    if not html.exists():
        raise SystemExit(f"the run wrote no report: {ranks[0].stdout}\n{ranks[0].stderr}")
    report = load_report(str(run_json))
    if not report.probes:
        raise SystemExit(f"the run measured no probes: {report.why}")
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
