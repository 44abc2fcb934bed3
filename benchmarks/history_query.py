"""`preflight history` for one host on a large history: 10,000 runs x 256 hosts in one SQLite file.

    .venv/bin/python benchmarks/history_query.py [--runs 10000] [--hosts 256] [--folder /tmp/pf-history-bench]

Builds (once; reused when the file exists) a history through preflight's own schema: per run
256 hosts, 2 figures per host (dp and tp all_reduce at the largest size, the figures the
judge reads), 2 findings. Then measures, each the median of 5 after one warm-up:

- `preflight history --host H --json` as a user runs it: the whole CLI process, wall time
  (and its CPU time, user + system: on a shared machine the wall time also counts waiting);
- the query alone (`runs_shown`, the last 50 runs of one host, with their hosts and figures);
- rank 0's own work before the verdict on this history (`recall`: each of 256 hosts' own
  past for 2 figures, and the flaky rule for 256 hosts), and writing one 256-host run;

and the same on a 100-run history built the same way, the same-run baseline: the ratio
says how the cost grows with the history's length (an index scan stays flat). Each is
reported as wall time and as CPU time (user + system): on a shared, loaded machine the wall
time also counts waiting for a core.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preflight.history import judge, schema
from preflight.history.queries import runs_shown
from preflight.history.record import write_run
from preflight.history.store import transaction
from preflight.model.history_records import FigureRow, HistoryFilters
from tests.helpers.synthetic import history_report  # a FAKE 256-host run, for the write's cost

BATCH_RUNS = 200


def build(path: Path, runs: int, hosts: int) -> None:
    """A history of `runs` runs x `hosts` hosts (skipped when the file exists)."""
    if path.exists():
        return
    url = f"sqlite:///{path}"
    rng = random.Random(7)
    names = [f"node{h:04d}" for h in range(hosts)]
    started = time.time() - runs * 600.0
    with transaction(url, 60.0, write=True):
        pass  # the schema
    for first in range(0, runs, BATCH_RUNS):
        with transaction(url, 60.0, write=True) as conn:
            run_rows, host_rows, figure_rows, finding_rows = [], [], [], []
            for index in range(first, min(runs, first + BATCH_RUNS)):
                pk = index + 1
                failed = {names[rng.randrange(hosts)]} if rng.random() < 0.1 else set()
                run_rows.append({"id": pk, "run_id": f"slurm-{index}", "job_id": str(index), "launcher": "slurm",
                                 "started_at": started + index * 600.0, "finished_at": started + index * 600.0 + 40,
                                 "world_size": hosts * 8, "num_nodes": hosts, "mesh": f"dp{hosts},tp8",
                                 "backend": "nccl", "verdict": "failed" if failed else "passed",
                                 "exit_code": 3 if failed else 0, "version": "bench", "command_line": "preflight"})
                for h, name in enumerate(names):
                    host_rows.append({"run_pk": pk, "host": name, "ranks": f"{h * 8}-{h * 8 + 7}",
                                      "failed": name in failed})
                    for dim, value, size in (("tp", 360.0, 256 << 20), ("dp", 46.0, 256 << 20)):
                        figure_rows.append({"run_pk": pk, "kind": "collective", "subject": name, "host": name,
                                            "gpu_uuid": "", "dim": dim, "op": "all_reduce", "group_index": h,
                                            "group_size": 8 if dim == "tp" else hosts,
                                            "group_hosts": 1 if dim == "tp" else hosts, "size_bytes": size,
                                            "value": value * rng.uniform(0.93, 1.05), "unit": "GB/s"})
                finding_rows += [{"run_pk": pk, "check_id": "BW008", "severity": "warn", "message": "m", "hosts": "",
                                  "ranks": ""},
                                 {"run_pk": pk, "check_id": "GPU003" if failed else "ENV001", "severity": "info",
                                  "message": "m", "hosts": ",".join(sorted(failed)), "ranks": ""}]
            for table, rows in ((schema.runs, run_rows), (schema.run_hosts, host_rows), (schema.figures, figure_rows),
                                (schema.findings, finding_rows)):
                conn.execute(insert(table), rows)


def _median_s(call, repeat: int = 5, clock=time.perf_counter) -> float:  # type: ignore[no-untyped-def]
    call()
    times = []
    for _ in range(repeat):
        t0 = clock()
        call()
        times.append(clock() - t0)
    return statistics.median(times)


def measure(path: Path, hosts: int, runs: int) -> dict[str, float]:
    """Seconds for the CLI, the query, rank 0's recall, and one run's write, on the history at path."""
    url = f"sqlite:///{path}"
    host = f"node{hosts // 2:04d}"
    cli = [sys.executable, "-m", "preflight", "history", "--history", url, "--host", host, "--json"]
    shown = min(50, runs)  # the last 50 runs, or every run of a smaller history (the smoke test's)

    def run_cli() -> None:
        out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
        assert len(json.loads(out)["runs"]) == shown

    def query() -> None:
        with transaction(url, 30.0, write=False) as conn:
            assert len(runs_shown(conn, HistoryFilters(host=host, last=50))) == shown

    rows = [FigureRow("collective", f"node{h:04d}", 350.0, "GB/s", host=f"node{h:04d}", dim=dim, op="all_reduce",
                      group_size=8 if dim == "tp" else hosts, group_hosts=1 if dim == "tp" else hosts,
                      size_bytes=256 << 20) for h in range(hosts) for dim in ("tp", "dp")]

    def recall() -> None:
        with transaction(url, 30.0, write=False) as conn:
            judge.drops(conn, rows)
            judge.flaky_hosts(conn, [r.subject for r in rows], 3, 10)

    report = history_report("bench-write", [f"node{h:04d}" for h in range(hosts)])

    def write() -> None:
        with transaction(url, 30.0, write=True) as conn:
            write_run(conn, report)

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli_s = _median_s(run_cli)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / 6  # 1 warm-up + 5
    cpu = time.process_time  # this process's CPU: SQLite runs in it; on a shared machine wall time also waits
    return {"cli_s": cli_s, "cli_cpu_s": cpu_s, "query_s": _median_s(query), "query_cpu_s": _median_s(query, clock=cpu),
            "recall_s": _median_s(recall), "recall_cpu_s": _median_s(recall, clock=cpu),
            "write_s": _median_s(write), "write_cpu_s": _median_s(write, clock=cpu)}


def main() -> None:
    """Build both histories, measure both, print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=256)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/pf-history-bench"))
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    big, small = args.folder / f"h{args.runs}x{args.hosts}.db", args.folder / f"h100x{args.hosts}.db"
    t0 = time.perf_counter()
    build(big, args.runs, args.hosts)
    built_s = time.perf_counter() - t0
    build(small, 100, args.hosts)
    large, baseline = measure(big, args.hosts, args.runs), measure(small, args.hosts, 100)
    print(json.dumps({"runs": args.runs, "hosts": args.hosts, "file_mb": round(big.stat().st_size / 1e6, 1),
                      "build_s": round(built_s, 1),
                      "large": {k: round(v, 4) for k, v in large.items()},
                      "baseline_100_runs": {k: round(v, 4) for k, v in baseline.items()},
                      "ratio": {k: round(large[k] / baseline[k], 2) for k in large}}, indent=1))


if __name__ == "__main__":
    main()
