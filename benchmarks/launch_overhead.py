"""How much does `preflight launch -n N` cost over the floor of any torch launch?

The floor is a bare torchrun of a script that imports torch, inits gloo and does one
all_reduce: every multi-process torch job pays that. Both are run alternately, several
repetitions in one invocation, so machine noise hits both alike; we print min and median
wall time of each and the ratio of medians.

    python benchmarks/launch_overhead.py --nproc 4 --repeat 5 [-- extra preflight args]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(command: list[str]) -> float:
    """Wall seconds of one command; fails loudly if it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="extra preflight run options (after --)")
    args = parser.parse_args()
    floor_cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                 str(args.nproc), str(HERE / "floor_allreduce.py")]
    preflight_cmd = [sys.executable, "-m", "preflight", "launch", "-n", str(args.nproc), "--quiet", *args.extra]
    floor, launch = [], []
    for _ in range(args.repeat):
        floor.append(timed(floor_cmd))
        launch.append(timed(preflight_cmd))
    ratio = statistics.median(launch) / statistics.median(floor)
    print(f"nproc={args.nproc} repeat={args.repeat} extra={' '.join(args.extra) or '(none)'}")
    for label, times in (("floor (torchrun + gloo + 1 all_reduce)", floor), ("preflight launch", launch)):
        print(f"{label:40s} min {min(times):.2f}s median {statistics.median(times):.2f}s")
    print(f"ratio of medians launch/floor: {ratio:.2f}")


if __name__ == "__main__":
    main()
