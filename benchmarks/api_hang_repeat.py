"""The API-hang test, repeated on one CPU: does every rank leave its record every time? (issue 32)

    .venv/bin/python benchmarks/api_hang_repeat.py --runs 30 [--cpu 0]

Not a speed benchmark: the repetition the suite keeps to one run. Runs
`tests/test_api.py::test_a_probe_hang_in_the_jobs_own_group_says_stuck_on_every_rank` (torchrun,
4 gloo ranks, a planted all_to_all hang, rank 1 slow after its call) `--runs` times, each pytest
and every process it starts pinned to CPU `--cpu` (`taskset -c`, the load under which CI once
lost rank 1's record). One JSON line per run (passed, seconds, load average), then the count;
docs/testing.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/test_api.py::test_a_probe_hang_in_the_jobs_own_group_says_stuck_on_every_rank"


def one_run(cpu: int) -> dict[str, object]:
    """The test once, pinned to `cpu`: whether it passed, how long it took, the load as it ended."""
    started = time.monotonic()
    done = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly",
                           "-p", "no:cacheprovider", TEST], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return {"passed": done.returncode == 0, "seconds": round(time.monotonic() - started, 1),
            "load": round(os.getloadavg()[0], 1), **({} if done.returncode == 0 else {"tail": done.stdout[-2000:]})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--cpu", type=int, default=0)
    args = parser.parse_args()
    passed = 0
    for index in range(1, args.runs + 1):
        result = one_run(args.cpu)
        passed += bool(result["passed"])
        print(json.dumps({"run": index, **result}), flush=True)
    print(json.dumps({"test": TEST, "runs": args.runs, "passed": passed, "cpu": args.cpu}))


if __name__ == "__main__":
    main()
