"""Never lie, repeated: a rank SIGKILLed mid all_reduce, N runs per configuration (issue 23, item 1).

    .venv/bin/python benchmarks/killed_mid_collective.py --runs 10

Not a speed benchmark: the repetition the test suite keeps short
(tests/probes/test_killed_mid_collective.py runs each configuration once). Per configuration
(4 and 8 ranks, env:// and `preflight launch`, gloo, all_reduce of 16 MiB at 4 ranks and 64 MiB
at 8, 400 iterations) it starts the job, SIGKILLs one non-zero rank from outside 6 s after rank
0's "cross checks done", and checks the report: only that rank called dead anywhere, and every
living rank's exit code (env://) or the launch's (launch) equal to rank 0's verdict. Also where
the kill landed (BW002: inside a measured step; RUN008: as the probes started). One JSON line
per run, then a summary per configuration; docs/testing.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.ranks import base_env, free_port, launch_workers, start_rank, wait_for_ranks
from tests.probes.test_killed_mid_collective import kill_after_cross_checks, ranks_called_dead


def probe_args(world_size: int) -> list[str]:
    size = "16MiB" if world_size == 4 else "64MiB"
    return ["--ops", "all_reduce", "--sizes", size, "--iters", "400", "--probe-timeout", "300"]


def run_env(world_size: int, folder: Path) -> dict:
    report = folder / "r.json"
    victim = world_size - 2
    port = free_port()
    procs = {r: start_rank(r, world_size, ["run", *probe_args(world_size), "--json", str(report)], port=port)
             for r in range(world_size)}
    started = time.monotonic()
    kill_after_cross_checks(procs[0].stderr, lambda: procs[victim].pid)
    runs = wait_for_ranks(procs, started, 400)
    return judge(report, {victim}, {r: run.returncode for r, run in runs.items() if r != victim})


def run_launch(world_size: int, folder: Path) -> dict:
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "preflight", "launch", "-n", str(world_size),
                             *probe_args(world_size), "--json", str(folder / "r.json")],
                            env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def last_forked() -> int:
        return launch_workers(proc.pid)[-1].pid

    victim = kill_after_cross_checks(proc.stderr, last_forked)
    proc.communicate(timeout=400)
    # Which rank the killed pid was: the launcher's RUN008 names it with its pid.
    findings = json.loads((folder / "r.json").read_text())["findings"]
    dead = {r for f in findings if f["check_id"] == "RUN008" and f"(pid {victim})" in f["message"] for r in f["ranks"]}
    return judge(folder / "r.json", dead, {"launch": proc.returncode})


def judge(report_path: Path, victims: set[int], living_codes: dict) -> dict:
    text = report_path.read_text()
    report = json.loads(text)
    ids = sorted({f["check_id"] for f in report["findings"] if f["check_id"] in ("BW002", "RUN008")})
    called = ranks_called_dead(text) | {r for f in report["findings"] if f["check_id"] == "RUN008" for r in f["ranks"]}
    return {"exit_code": report["exit_code"], "called_dead": sorted(called), "victims": sorted(victims),
            "only_victim_dead": bool(called) and called <= victims, "landed": ids,
            "living_codes": living_codes,
            "living_exit_with_rank_0": all(code == report["exit_code"] for code in living_codes.values())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--config", action="append", help="env:4, env:8, launch:4, launch:8 (default all)")
    args = parser.parse_args()
    configs = args.config or ["env:4", "env:8", "launch:4", "launch:8"]
    summary = {}
    for config in configs:
        how, n = config.split(":")
        good = 0
        for i in range(args.runs):
            with tempfile.TemporaryDirectory() as folder:
                try:
                    result = (run_env if how == "env" else run_launch)(int(n), Path(folder))
                except Exception as exc:  # a run that could not be judged counts as a failure
                    result = {"error": f"{type(exc).__name__}: {exc}"}
            ok = bool(result.get("only_victim_dead") and result.get("living_exit_with_rank_0"))
            good += ok
            print(json.dumps({"config": config, "run": i + 1, "ok": ok, **result}), flush=True)
        summary[config] = f"{good}/{args.runs}"
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
