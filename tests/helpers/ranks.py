"""Start real preflight ranks as separate processes: env://, `preflight launch`, plain CLI.

One way to start local env:// ranks: `spawn_env_ranks(n, args, place=...)` (or `start_rank` for
one rank the test drives itself). The placement says, per rank, how and where it runs: env
overrides and a fake host (tests/helpers/hosts.py; a network-namespace host from netns.py is
one too). `spread(hosts, per_host)` is the block layout a launcher would give.

Faults are planted from the test side only: per-rank environment variables (a placement's env),
a fake host's namespaces, or `plant_env`: the one `sitecustomize.py` hook, which runs code in
chosen ranks before preflight starts (for `preflight launch` / torchrun workers, whose
environments a test cannot set one by one, and for faults no variable can cause).
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.hosts import FakeHost
from tests.helpers.zygote import ZygoteRank, forkable, zygote

PYTHON = sys.executable
# env:// ranks are forked from a per-process zygote that imported torch once (tests/helpers/zygote.py);
# PREFLIGHT_TEST_EXEC_RANKS=1 starts every rank as an interpreter of its own instead.
FORK_RANKS = os.environ.get("PREFLIGHT_TEST_EXEC_RANKS", "") != "1"


@dataclass
class RankRun:
    """One finished process: exit code, output and how long it took."""

    rank: int
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


def free_port() -> int:
    """A TCP port nobody listens on right now, below the ephemeral range.

    Port 0 would give an ephemeral port (32768-60999), which preflight rightly warns about
    as a MASTER_PORT (PORT002); real jobs use ports below that range, and so do the tests.
    """
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(20000, 32000)
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without launcher variables, plus extra."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_", "PET_", "TORCHELASTIC_"))
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "GROUP_RANK", "NODE_RANK")
    }
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def run_cli(args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 120,
            cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m preflight ARGS`: run_python's."""
    return run_python(["-m", "preflight", *args], env, timeout, cwd)


def run_python(args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 120,
               cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python ARGS` (`-m preflight ...`, or a script: `SCRIPT.py ...`) as a process of its own in
    base_env(env), output captured; forked from this process's zygote when it can be
    (tests/helpers/zygote.py), as start_rank's ranks are, else exec'd.
    Killed, and TimeoutExpired raised, after `timeout` s (subprocess.run's contract)."""
    argv, full_env = [PYTHON, *args], base_env(env)
    proc = _forked(argv, full_env, cwd=cwd)
    if proc is None:
        return subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _forked(argv: list[str], env: dict[str, str], host: FakeHost | None = None,
            cwd: str | None = None) -> ZygoteRank | None:
    """`argv` in `env`, output piped, forked from the zygote (on a fake host: entering it, and counted among
    its processes) when it can be (tests/helpers/zygote.py); None when it must be exec'd."""
    if not (FORK_RANKS and forkable(argv, env, zygote_env := base_env())):
        return None
    if host is not None and os.geteuid() != 0:  # entering a mount namespace needs root: exec'd on the host
        return None
    proc = ZygoteRank(argv, zygote=zygote(zygote_env), host=host.entry() if host else None, env=env, text=True,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    return host.adopt(proc) if host else proc


@dataclass(frozen=True)
class Placement:
    """How and where one rank runs: on `host` (None: this machine as it is), with `env` over the job's,
    under `wrap` (a command that execs the rest, e.g. `taskset -c 1`: the rank's real CPU affinity)."""

    host: FakeHost | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    wrap: Sequence[str] = ()


# rank -> its Placement: a function, or a table (a rank it does not list runs as Placement()).
Place = Callable[[int], Placement] | Mapping[int, Placement]


def spread(hosts: Sequence[FakeHost], per_host: int,
           host_env: Mapping[int, Mapping[str, str]] | None = None) -> Callable[[int], Placement]:
    """Block layout: rank r on hosts[r // per_host], with the LOCAL_RANK and LOCAL_WORLD_SIZE a
    launcher sets there; host_env adds variables per host index (0-based)."""
    hosts = list(hosts)

    def place(rank: int) -> Placement:
        index = rank // per_host
        return Placement(hosts[index], {"LOCAL_RANK": str(rank % per_host), "LOCAL_WORLD_SIZE": str(per_host),
                                        **(host_env or {}).get(index, {})})
    return place


def start_rank(rank: int, world_size: int, args: Sequence[str], *, placement: Placement = Placement(),
               common_env: Mapping[str, str] | None = None, master_addr: str = "127.0.0.1",
               port: int, program: Sequence[str] = ("-m", "preflight"), fresh: bool = False) -> subprocess.Popen[str]:
    """`python -m preflight ARGS` (or `python PROGRAM ARGS`: a training script) as env:// rank `rank`
    of `world_size`, placed; output piped.

    A rank that can be is forked from this process's zygote (tests/helpers/zygote.py: torch already
    imported); `fresh=True` starts an interpreter of its own anyway (a test of what happens while a
    rank's interpreter starts or imports torch).

    Its environment: the test's without launcher variables (base_env), RANK / WORLD_SIZE /
    MASTER_ADDR / MASTER_PORT, LOCAL_RANK = rank and LOCAL_WORLD_SIZE = world_size (all on one
    host), then common_env, then the placement's env (each overrides what came before).
    """
    env = base_env({
        "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": master_addr, "MASTER_PORT": str(port),
        **(common_env or {}), **placement.env,
    })
    argv = [*placement.wrap, PYTHON, *program, *args]
    if not fresh and not placement.wrap and (proc := _forked(argv, env, placement.host)) is not None:
        return proc
    start = placement.host.popen if placement.host else subprocess.Popen
    return start(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def spawn_env_ranks(
    world_size: int,
    args: Sequence[str] = (),
    *,
    place: Place | None = None,
    absent: Sequence[int] = (),
    common_env: Mapping[str, str] | None = None,
    master_addr: str = "127.0.0.1",
    port: int | None = None,
    timeout: float = 120,
    program: Sequence[str] | None = None,
) -> dict[int, RankRun]:
    """Start `python -m preflight run ARGS` as env:// ranks 0..N-1 (minus `absent`); wait for all.

    `place(rank)` (or `place[rank]`) says how and where each rank runs (see Placement, spread);
    the environment is start_rank's. `program`: a training script (`[path]`) run as the ranks
    instead, as `python PATH ARGS` (preflight.check inside a job started by env://)."""
    port = port or free_port()
    lookup = place if callable(place) else (lambda rank: (place or {}).get(rank, Placement()))
    started = time.monotonic()
    argv = list(args) if program else ["run", *args]
    procs = {rank: start_rank(rank, world_size, argv, placement=lookup(rank), common_env=common_env,
                              master_addr=master_addr, port=port, program=program or ("-m", "preflight"))
             for rank in range(world_size) if rank not in absent}
    return wait_for_ranks(procs, started, timeout)


def wait_for_ranks(procs: Mapping[int, subprocess.Popen[str]], started: float, timeout: float) -> dict[int, RankRun]:
    """Wait for every rank's process, killing what is still running `timeout` s after `started`."""
    results = {}
    for rank, proc in procs.items():
        remaining = max(1.0, timeout - (time.monotonic() - started))
        try:
            out, err = proc.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n[test helper: killed after timeout]"
        results[rank] = RankRun(rank, proc.returncode, out, err, time.monotonic() - started)
    return results


def what_ranks_said(runs: Mapping[int, RankRun], tail: int = 1500) -> str:
    """Each rank's exit code and the last `tail` characters of its stdout and stderr: a failure's message."""
    return "".join(f"\n[rank {rank}] exit {run.returncode}:\n{run.stdout[-tail:]}{run.stderr[-tail:]}"
                   for rank, run in runs.items())


def exited(pid: int) -> bool:
    """The process has exited: gone, or a zombie its parent has not reaped yet (a daemon's parent is init,
    which reaps here up to ~2 s late; a rank's may be a launcher still busy)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def exit_times(procs: Mapping[int, subprocess.Popen[str]], since: float, bound_s: float) -> dict[int, float]:
    """Seconds after `since` at which each process was gone; one still running `bound_s` after is killed
    (and counted gone then)."""
    gone: dict[int, float] = {}
    while len(gone) < len(procs) and time.monotonic() < since + bound_s:
        for rank, proc in procs.items():
            if rank not in gone and proc.poll() is not None:
                gone[rank] = time.monotonic() - since
        time.sleep(0.02)
    for rank, proc in procs.items():
        if rank not in gone:
            proc.kill()
            proc.wait()
            gone[rank] = time.monotonic() - since
    return gone


# `preflight launch` forks its ranks from a forkserver unless told otherwise, and a fork runs no
# sitecustomize: a launch whose ranks carry plants must start each rank as its own interpreter.
EXEC = ["--start-method", "exec"]


def launch_forkserver(launcher_pid: int) -> Any:
    """The forkserver `preflight launch` started (a psutil.Process): its ranks fork from it."""
    import psutil

    [server] = [c for c in psutil.Process(launcher_pid).children() if "forkserver" in " ".join(c.cmdline())]
    return server


def launch_workers(launcher_pid: int) -> list[Any]:
    """The ranks `preflight launch` forked (from its forkserver), in the order they were forked.

    Ordered by creation time, not pid: pids wrap (pid_max is 32,768 here), and the highest pid
    can then be the first worker forked, rank 0, which must live to write the report."""
    return sorted(launch_forkserver(launcher_pid).children(), key=lambda worker: (worker.create_time(), worker.pid))


def start_script_ranks(script: str, world: int, store: Path) -> list[subprocess.Popen[str]]:
    """`python -c SCRIPT RANK STORE` for each rank, output piped: a script that forms its own process
    group over a FileStore at `store` (a unit of the probes on real gloo ranks, without a launcher)."""
    return [subprocess.Popen([sys.executable, "-c", script, str(rank), str(store)], env=base_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(world)]


def plant_env(folder: Path, plants: Mapping[int, str]) -> dict[str, str]:
    """Env that makes each rank in `plants` run its code at interpreter start, nobody else.

    THE one test-side hook: a single `sitecustomize.py` (written under `folder`) on PYTHONPATH,
    which picks the rank by RANK (set by env://, torchrun and `preflight launch` alike; the
    launcher's own process has none, so it runs nothing). Pass every rank's plant in one call:
    Python imports only the first sitecustomize.py on its path, so a second one would
    silently never run; this refuses to write one where one already is on PYTHONPATH.
    Under `preflight launch`, pass EXEC so that every rank starts an interpreter of its own.
    """
    existing = os.environ.get("PYTHONPATH", "")
    shadowed = [entry for entry in existing.split(os.pathsep) if entry and Path(entry, "sitecustomize.py").exists()]
    if shadowed:
        raise RuntimeError(f"a sitecustomize.py is already on PYTHONPATH ({shadowed}): plant everything in one call")
    here = folder / "plants"
    here.mkdir(parents=True, exist_ok=True)
    if (here / "sitecustomize.py").exists():
        raise RuntimeError(f"{here} already holds plants: pass every rank's plant to one plant_env call")
    branches = "".join(f"{'if' if i == 0 else 'elif'} _rank == {str(rank)!r}:\n"
                       f"{textwrap.indent(textwrap.dedent(code).strip(), '    ')}\n"
                       for i, (rank, code) in enumerate(sorted(plants.items())))
    (here / "sitecustomize.py").write_text(f"import os\n_rank = os.environ.get('RANK')\n{branches}")
    return {"PYTHONPATH": f"{here}{os.pathsep}{existing}" if existing else str(here)}


def read_json(path: Path) -> dict:
    """A JSON report written by a run."""
    return json.loads(Path(path).read_text())
