"""Start real preflight ranks as separate processes: env://, `preflight launch`, plain CLI.

Faults are planted from the test side only: per-rank environment variables, or a
`sitecustomize.py` on PYTHONPATH that changes one rank's process before preflight starts.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PYTHON = sys.executable


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
    """`python -m preflight ARGS` as a subprocess, output captured."""
    return subprocess.run([PYTHON, "-m", "preflight", *args], env=base_env(env), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def spawn_env_ranks(
    world_size: int,
    args: Sequence[str] = (),
    *,
    absent: Sequence[int] = (),
    rank_env: Mapping[int, Mapping[str, str]] | None = None,
    common_env: Mapping[str, str] | None = None,
    port: int | None = None,
    timeout: float = 120,
    wrap: Mapping[int, Sequence[str]] | None = None,
) -> dict[int, RankRun]:
    """Start `python -m preflight run ARGS` as env:// ranks 0..N-1 (minus `absent`); wait for all.

    `wrap[rank]` is a command prefix for that rank (e.g. tests/helpers/namespaces.host_wrapper:
    its own UTS hostname, /etc/hosts, /dev/shm, ulimit)."""
    port = port or free_port()
    procs = {}
    started = time.monotonic()
    for rank in range(world_size):
        if rank in absent:
            continue
        env = base_env({
            "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            **(common_env or {}), **((rank_env or {}).get(rank, {})),
        })
        prefix = list((wrap or {}).get(rank, ()))
        procs[rank] = subprocess.Popen([*prefix, PYTHON, "-m", "preflight", "run", *args], env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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


def plant_in_rank(tmp_path: Path, rank: int, code: str, rank_variable: str = "LOCAL_RANK") -> dict[str, str]:
    """Env that makes rank `rank` run `code` at interpreter start (sitecustomize), nobody else.

    Used with `preflight launch`, whose workers the test cannot give separate environments.
    """
    folder = tmp_path / f"plant-{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    body = textwrap.indent(textwrap.dedent(code), "    ")
    (folder / "sitecustomize.py").write_text(
        f"import os\nif os.environ.get({rank_variable!r}) == {str(rank)!r}:\n{body}\n"
    )
    existing = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{folder}{os.pathsep}{existing}" if existing else str(folder)}


def read_json(path: Path) -> dict:
    """A JSON report written by a run."""
    return json.loads(Path(path).read_text())
