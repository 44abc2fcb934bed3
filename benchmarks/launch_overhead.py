"""How much does `preflight launch -n N` cost over the floor of any torch launch?

The floor is a bare torchrun of a script that imports torch, inits gloo and does one
all_reduce: every multi-process torch job pays that. Both are run alternately, several
repetitions in one invocation, so machine noise hits both alike; we print min and median
wall time of each and the ratio of medians.

    python benchmarks/launch_overhead.py --nproc 4 --repeat 5 [-- extra preflight args]
    python benchmarks/launch_overhead.py --compare-src /tmp/old   # also preflight from another source tree
    python benchmarks/launch_overhead.py --tiny                   # a smoke run: 2 ranks, 1 repetition

A verdict that is not a pass (a straggler on a loaded machine: exit 3) still counts: the cost is
what is measured. --compare-src DIR adds a third command per repetition, `preflight launch` with
DIR (a `git archive <commit> preflight | tar -x -C DIR`) first on PYTHONPATH, run from DIR's
parent: before and after, in one run, against the same floor.
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


def timed(command: list[str], ok: tuple[int, ...] = (0,), src: str = "") -> float:
    """Wall seconds of one command; fails loudly if it exits otherwise than `ok`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if src:  # that tree's preflight: PYTHONPATH, and a working directory with no checkout in it
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    started = time.perf_counter()
    cwd = str(Path(src).parent) if src else None
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=cwd)
    elapsed = time.perf_counter() - started
    if result.returncode not in ok:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare-src", default="", help="also run preflight launch from this source tree")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: 2 ranks, 1 repetition")
    parser.add_argument("extra", nargs="*", help="extra preflight run options (after --)")
    args = parser.parse_args()
    if args.tiny:
        args.nproc, args.repeat = 2, 1
    floor_cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                 str(args.nproc), str(HERE / "floor_allreduce.py")]
    preflight_cmd = [sys.executable, "-m", "preflight", "launch", "-n", str(args.nproc), "--quiet", *args.extra]
    verdicts = (0, 1, 3)  # passed, warnings under --strict, failed: each a whole run
    src = os.path.abspath(args.compare_src) if args.compare_src else ""
    runs: dict[str, list[float]] = {"floor (torchrun + gloo + 1 all_reduce)": [], "preflight launch": []}
    if src:
        runs[f"preflight launch from {args.compare_src}"] = []
    for _ in range(args.repeat):
        runs["floor (torchrun + gloo + 1 all_reduce)"].append(timed(floor_cmd))
        runs["preflight launch"].append(timed(preflight_cmd, verdicts))
        if src:
            runs[f"preflight launch from {args.compare_src}"].append(timed(preflight_cmd, verdicts, src))
    print(f"nproc={args.nproc} repeat={args.repeat} extra={' '.join(args.extra) or '(none)'} "
          f"load average {os.getloadavg()[0]:.1f}")
    floor = statistics.median(runs["floor (torchrun + gloo + 1 all_reduce)"])
    for label, times in runs.items():
        print(f"{label:40s} min {min(times):.2f}s median {statistics.median(times):.2f}s "
              f"ratio of medians to the floor {statistics.median(times) / floor:.2f}")


if __name__ == "__main__":
    main()
