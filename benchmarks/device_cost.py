"""What the device probes add to a launch: `preflight launch -n N` with and without `--skip gpu-probe`.

Alternating pairs in one invocation, so machine noise hits both alike. Prints, per mode, the
median wall time, the median of step 8's phase (`meta.phases.probes`) and, with the device
probes, every rank's family wall time (`device_probes[].elapsed_s`). Not a test.

    python benchmarks/device_cost.py [--nproc 4] [--pairs 5]
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(nproc: int, extra: list[str], out: Path) -> tuple[float, float, list[float]]:
    """(wall seconds, probes phase seconds, family seconds per rank) of one launch."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "preflight", "launch", "-n", str(nproc), "--quiet", "--json",
                           str(out), *extra], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if not out.exists():  # no report: the launch itself failed, and its own words say why
        raise SystemExit(f"device_cost: `preflight launch {' '.join(extra)}` exited {done.returncode} without a "
                         f"report:\n{done.stderr[-2000:]}")
    report = json.loads(out.read_text())
    return wall, float(report["meta"]["phases"].get("probes", 0.0)), [r["elapsed_s"] for r in report["device_probes"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="device-cost-"))
    atexit.register(shutil.rmtree, folder, True)  # the runs' reports: gone with this process
    got: dict[str, list[tuple[float, float, list[float]]]] = {"with device probes": [], "--skip gpu-probe": []}
    for _ in range(args.pairs):
        got["with device probes"].append(one(args.nproc, [], folder / "with.json"))
        got["--skip gpu-probe"].append(one(args.nproc, ["--skip", "gpu-probe"], folder / "skip.json"))
    for mode, runs in got.items():
        family = [s for _, _, per_rank in runs for s in per_rank]
        text = (f"; family per rank median {statistics.median(family):.3f} s (min {min(family):.3f}, "
                f"max {max(family):.3f})") if family else ""
        print(f"{mode}: wall median {statistics.median(w for w, _, _ in runs):.2f} s, step 8 median "
              f"{statistics.median(p for _, p, _ in runs):.3f} s{text}")


if __name__ == "__main__":
    main()
