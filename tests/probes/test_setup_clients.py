"""No thread blocks on a store client another thread uses, and no signal waits for one (issue 47).

The issue's run: a rank missing from the probes' set-up (here rank 3, held inside
init_device_mesh, as a rank started with another --mesh is), so every other rank's set-up
thread waits inside torch's group creation, in a store wait that lasts the DeviceMesh groups'
timeout (torch's default: 30 min). Rank 0 gives up on the set-up at its deadline and reads
every rank's stage to name the laggard. Before, it read them on the client the set-up thread
was blocked in: its main thread waited for that client's lock inside C++, where no signal
handler runs, and SIGTERM was ignored until the wait ended (killed after 10 minutes in the
issue; here the test's bound). Now torch's set-up has a client of its own
(probes/liveness.probe_stores) and the main thread never touches it.

Real ranks, a real gloo process group and DeviceMesh, real signals. The plants only hold
rank 3 and say where rank 0 is (tests/helpers/ranks.plant_env); tests/helpers/client_use.py
watches which thread uses which client inside every rank.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.helpers import client_use
from tests.helpers.ranks import exit_times, free_port, plant_env, read_json, start_rank

REPO = Path(__file__).resolve().parents[2]
WORLD = 4
START_BOUND_S = 240.0  # four ranks importing torch on two loaded cores, then the set-up's 17 s deadline
# Every rank gone this long after SIGTERM: 10x the 2 s the issue asks for (docs/performance.md has the
# measured times); before, rank 0 stayed until the 30 min store wait ended.
SIGNAL_BOUND_S = 20.0
RUN_BOUND_S = 120.0  # "does not hang": the whole run once the set-up was given up on
ARGS = ["run", "--mesh", "dp2,tp2", "--backend", "gloo", "--ops", "all_reduce", "--sizes", "64KiB",
        "--probe-timeout", "2", "--timeout", "60"]

# Rank 3 never builds its DeviceMesh: the others' groups wait for it in the store (it beats on: not dead).
HELD_IN_DEVICE_MESH = """
    import sys, time
    import torch.distributed.device_mesh as device_mesh
    def init_device_mesh(*args, **kwargs):
        print("PLANTED-held", file=sys.stderr, flush=True)
        time.sleep(600)
    device_mesh.init_device_mesh = init_device_mesh
"""
# Rank 0 says when it reads the stages (it gave up on the set-up, whose thread still waits inside torch),
# and stays a moment after it read them, so that the signal lands in the probes' phase.
READING_STAGES = """
    import sys, time
    from preflight.probes import setup
    _read_stages = setup.read_stages
    def read_stages(*args, **kwargs):
        print("PLANTED-reading-stages", file=sys.stderr, flush=True)
        stages = _read_stages(*args, **kwargs)
        time.sleep(60)
        return stages
    setup.read_stages = read_stages
"""
WATCH_CLIENTS = f"""
    import sys
    sys.path.insert(0, {str(REPO)!r})
    from tests.helpers import client_use
    client_use.install()
"""


def _start(folder: Path, plants: dict[int, str]) -> tuple[dict[int, subprocess.Popen[str]], list[str], Path]:
    report = folder / "r.json"
    env = plant_env(folder, plants)
    port = free_port()
    procs = {r: start_rank(r, WORLD, [*ARGS, "--json", str(report)], port=port, common_env=env)
             for r in range(WORLD)}
    lines: list[str] = []

    def read(rank: int, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append(f"[rank {rank}] {line}")

    for rank, proc in procs.items():
        threading.Thread(target=read, args=(rank, proc.stderr), daemon=True).start()
        threading.Thread(target=read, args=(rank, proc.stdout), daemon=True).start()
    return procs, lines, report


def _wait_for_line(lines: list[str], text: str, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if any(text in line for line in lines):
            return True
        time.sleep(0.05)
    return False


def sigterm_after_set_up_given_up(folder: Path) -> tuple[dict[int, float], dict[int, int], str, Path]:
    """The issue's run, SIGTERM to every rank 1 s after rank 0 began reading the stages: rank -> seconds
    until gone, rank -> exit code, every line, rank 0's report (benchmarks/interrupt_exit.py repeats it)."""
    procs, lines, report = _start(folder, {3: HELD_IN_DEVICE_MESH, 0: READING_STAGES})
    assert _wait_for_line(lines, "PLANTED-reading-stages", START_BOUND_S), "".join(lines)[-3000:]
    time.sleep(1.0)  # rank 0 has read the stages (or waits for the set-up thread's client: before)
    signalled = time.monotonic()
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    gone = exit_times(procs, signalled, 3 * SIGNAL_BOUND_S)
    return gone, {r: p.returncode for r, p in procs.items()}, "".join(lines), report


def test_sigterm_while_set_up_threads_wait_inside_torch_for_a_missing_rank_ends_every_rank(tmp_path: Path) -> None:
    gone, codes, output, report = sigterm_after_set_up_given_up(tmp_path)
    assert max(gone.values()) < SIGNAL_BOUND_S, (gone, output[-3000:])
    assert set(codes.values()) == {4}, (codes, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    written = read_json(report)  # rank 0's partial report
    assert written["exit_code"] == 4 and any(f["check_id"] == "RUN004" for f in written["findings"])


def test_no_thread_calls_the_client_that_torchs_set_up_blocks_in(tmp_path: Path) -> None:
    plants = {r: WATCH_CLIENTS for r in range(WORLD)}
    plants[3] += HELD_IN_DEVICE_MESH
    procs, lines, report = _start(tmp_path, plants)
    started = time.monotonic()
    # Before: rank 0 says so, then waits inside C++ for the set-up thread's store wait (30 min).
    while time.monotonic() - started < START_BOUND_S and procs[0].poll() is None:
        if any(client_use.SHARED in line for line in lines):
            break
        time.sleep(0.1)
    exit_times(procs, time.monotonic(), 0 if procs[0].poll() is None else RUN_BOUND_S)
    output = "".join(lines)
    assert client_use.SHARED not in output, output[-3000:]
    # The run went where the did: rank 0 gave up on the set-up (every rank inside the DeviceMesh's
    # groups, rank 3 held there) and read the stages.
    findings = read_json(report)["findings"]
    hangs = [f for f in findings if f["check_id"] == "BW002"]
    assert len(hangs) == 1 and "every rank is inside setup stage 'DeviceMesh'" in hangs[0]["message"], \
        (findings, output[-3000:])
    assert {proc.returncode for proc in procs.values()} == {3}, output[-3000:]
