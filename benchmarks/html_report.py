"""HTML report size and open time for a 1024-rank job with three probed mesh dimensions.

    .venv/bin/python benchmarks/html_report.py [--ranks 1024] [--mesh dp8,pp8,tp16] [--opens 5]

The report is synthetic (tests/helpers/synthetic.py, documented as a fake): 1024 ranks on
128 hosts, 70 environment variables each with drift on one host, 33 checks, 3 ops x 7 sizes
on every group of every dimension. "Open time" is the page's own clock from navigation start
to the page's script having run (`data-ready-ms`; the charts are inline SVG, drawn with the
page), in Debian's headless chromium.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.reports import html
from tests.helpers.browser import chromium_driver, console_errors, find_chromium, wait_ready
from tests.helpers.synthetic import big_report


def measure(ranks: int, mesh: str, opens: int) -> dict[str, float]:
    """Render once, open `opens` times in a fresh page; return the figures."""
    report = big_report(world_size=ranks, mesh=mesh)
    started = time.perf_counter()
    page = html.render(report)
    render_s = time.perf_counter() - started
    total = len(page.encode())
    figures = {"ranks": ranks, "probe_results": len(report.probes), "total_mb": total / 1e6, "render_s": render_s}
    chromium, chromedriver = find_chromium(), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        return figures
    with tempfile.TemporaryDirectory() as folder, chromium_driver(chromium, chromedriver) as driver:
        path = Path(folder) / "report.html"
        path.write_text(page)
        times = []
        for _ in range(opens):
            driver.get("about:blank")
            driver.get(path.as_uri())
            wait_ready(driver, timeout_s=60)
            times.append(float(driver.execute_script(
                "return document.documentElement.getAttribute('data-ready-ms')")) / 1000)
        figures.update(open_median_s=statistics.median(times), open_max_s=max(times),
                       console_errors=len(console_errors(driver)))
    return figures


def main() -> None:
    """Print the figures, one per line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--mesh", default="dp8,pp8,tp16")
    parser.add_argument("--opens", type=int, default=5)
    args = parser.parse_args()
    for name, value in measure(args.ranks, args.mesh, args.opens).items():
        print(f"{name:>16}: {value:.3f}" if isinstance(value, float) else f"{name:>16}: {value}")


if __name__ == "__main__":
    main()
