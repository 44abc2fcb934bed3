"""One rank parsing its own NCCL log (lib/nccl_log.py): time and memory for a 200,000-line log.

    .venv/bin/python benchmarks/nccl_log_parse.py                  # 200,000 lines, 5 runs
    .venv/bin/python benchmarks/nccl_log_parse.py --lines 20000 --runs 3

The log is what NCCL 2.26.2 writes (tests/helpers/fake_nccl.py, NCCL's own format strings) for one
rank of a 16-host job forming communicator after communicator with 32 channels each, repeated to
the line count (a long job's log: many communicators, thousands of channel lines), plus WARN lines.
Each run, in a fresh child process: `floor`, reading the file line by line and doing nothing (the
I/O and line splitting any reader pays), then `parse` (read_log_file), then the same parse again
under tracemalloc for its peak traced allocation (not timed: tracing slows allocation several-fold),
and the child's peak RSS. The figure is parse's median and its ratio to
the floor's median, with the spread and the machine's load.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_log(path: str, lines: int) -> int:
    """A rank's log of about `lines` lines, as NCCL writes it; the lines written."""
    from tests.helpers import fake_nccl
    from tests.helpers.fake_nccl import Comm, DebugSettings, NcclHost

    hosts = [f"node{h:02d}" for h in range(16) for _ in range(8)]
    host = NcclHost("node00", release="v2.26.2-1", nics=[(f"mlx5_{i}", 1, "IB") for i in range(8)], nvls=True,
                    warnings=[("transport/net_ib.cc", 1184, "", "NET/IB : Got async event : port error")])
    buffer = io.StringIO()
    settings = DebugSettings("INFO", {"INIT", "NET", "GRAPH", "ENV"}, buffer)
    network = None
    while buffer.getvalue().count("\n") < lines:
        network = fake_nccl.write_log(host, Comm(7, hosts, device=7, channels=32), {}, settings, 4242, 4242, network)
    text = "".join(buffer.getvalue().splitlines(keepends=True)[:lines])
    Path(path).write_text(text)
    return text.count("\n")


def one_run(path: str) -> dict[str, float]:
    """Floor and parse of the file, in this (fresh) process."""
    import resource
    import tracemalloc

    from preflight.lib.nccl_log import read_log_file

    started = time.perf_counter()
    with open(path, "rb") as handle:
        count = sum(1 for _ in handle)
    floor = time.perf_counter() - started
    started = time.perf_counter()
    read = read_log_file(path)
    parse = time.perf_counter() - started
    tracemalloc.start()  # a second parse for memory only: tracing slows allocation several-fold
    read_log_file(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    account = read.accounts[0]
    assert count == read.lines and account.network == "IB" and account.gdr is True, (count, read.lines)
    return {"floor_s": floor, "parse_s": parse, "traced_peak_mib": peak / 2**20,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "lines": read.lines,
            "account_bytes": len(__import__("preflight.model.codec", fromlist=["encode"]).encode(account))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--one", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one)))
        return
    with tempfile.TemporaryDirectory(prefix="pf-nccl-log-") as folder:
        path = os.path.join(folder, "nccl.log")
        written = write_log(path, args.lines)
        runs = []
        for _ in range(args.runs):
            done = subprocess.run([sys.executable, __file__, "--one", path], check=True, capture_output=True, text=True)
            runs.append(json.loads(done.stdout))
        size_mb = os.path.getsize(path) / 1e6
    parse = [r["parse_s"] for r in runs]
    floor = [r["floor_s"] for r in runs]
    ratio = statistics.median(parse) / statistics.median(floor)
    print(json.dumps({"lines": written, "file_mb": round(size_mb, 1), "runs": runs}))
    print(f"{written} lines ({size_mb:.1f} MB), {args.runs} runs, load {os.getloadavg()[0]:.1f}: parse median "
          f"{statistics.median(parse):.3f} s (min {min(parse):.3f}, max {max(parse):.3f}), floor median "
          f"{statistics.median(floor):.3f} s, ratio of medians {ratio:.1f}; "
          f"traced peak {max(r['traced_peak_mib'] for r in runs) * 1024:.0f} KiB, peak RSS "
          f"{max(r['peak_rss_mib'] for r in runs):.0f} MiB, account {runs[0]['account_bytes']} bytes")


if __name__ == "__main__":
    main()
