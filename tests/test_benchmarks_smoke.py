"""Every benchmark in benchmarks/ runs, at a tiny size, on every CI run (issue 32).

A benchmark is only run by hand, so nothing noticed when one broke (rank0_scale.py refused every
payload it generated after a model field was added; probe_fidelity.py still called the store API
the probes had left). Here each runs as a user runs it, with arguments that make it cheap; the
test fails if it exits non-zero or prints none of its result line. The figures themselves are
not judged: at this size and on a shared machine they mean nothing. A Python benchmark's process
is forked from the test process's zygote (tests/helpers/zygote.py: `python SCRIPT.py ARGS` run as
the interpreter runs it, torch already imported) rather than exec'd: ~2 CPU-s less each.

A benchmark that needs a GPU is run here without one: it must stop with one line saying it
needs a GPU and exit 2, never a traceback. `test_every_benchmark_is_smoked` keeps the two tables
complete: a new file in benchmarks/ without an entry fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.ranks import base_env, run_python
from tests.helpers.tools import require_root, require_tool

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
TIMEOUT_S = 600  # "does not hang" on a loaded 2-core machine; the slowest runs in ~30 s alone


@dataclass(frozen=True)
class Smoke:
    """How one benchmark runs at a tiny size, and the line that says it finished."""

    args: tuple[str, ...]
    prints: str  # a regular expression its stdout must match ("": it prints nothing)
    needs: tuple[str, ...] = ()  # "root", "chromium"
    launcher: tuple[str, ...] = field(default=())  # what runs the script (default: this Python)


SMOKE: dict[str, Smoke] = {
    "api_hang_repeat.py": Smoke(("--runs", "1"), r'"runs": 1, "passed": 1\b'),
    "api_overhead.py": Smoke(("--tiny",), r"ratio of medians"),
    "device_cost.py": Smoke(("--nproc", "2", "--pairs", "1"), r"with device probes: wall median"),
    "device_fidelity.py": Smoke(("--device", "cpu", "--rounds", "1", "--budget", "0.2"), r"\| copy \|"),
    "floor_allreduce.py": Smoke((), "",  # prints nothing: its own assert checks the all_reduce
                                launcher=("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")),
    "history_query.py": Smoke(("--runs", "5", "--hosts", "4", "--folder", "{tmp}"), r'"ratio"'),
    "html_report.py": Smoke(("--ranks", "16", "--mesh", "dp2,tp2,pp4", "--opens", "1"), r"console_errors: 0",
                            ("chromium",)),
    "interrupt_exit.py": Smoke(("--runs", "1", "--scenario", "sigterm-all"), r'"summary"'),
    "killed_mid_collective.py": Smoke(("--runs", "1", "--config", "env:4"), r'"summary": \{"env:4": "1/1"\}'),
    "launch_overhead.py": Smoke(("--tiny",), r"preflight launch .* ratio of medians to the floor"),
    # Its result line either way: whether two shaped hosts of four are localized is a timing, judged by the
    # quiet tests/probes/test_probes_netns.py (here, beside the other workers, it once found no slow group).
    "localization_netns.py": Smoke(("--runs", "1"), r"^run 0: (no localization|.* named ).*probes [0-9.]+ s",
                                   ("root",)),
    "localization_sim.py": Smoke(("--hosts", "64", "--bad", "1", "--trials", "2"), r"round robin"),
    "nccl_log_parse.py": Smoke(("--lines", "2000", "--runs", "1"), r"2000 lines .* parse median .* ratio of medians"),
    "probe_fidelity.py": Smoke(("--tiny",), r"all_reduce .* ratio (.*\n)*.*all_to_all .* ratio"),
    "gpu_node_facts.py": Smoke((), r"^local rank 1: health \d+ bytes \(\d+ its own, \d+ its host's"),
    "rank0_scale.py": Smoke(("--ranks", "64", "--world", "slurm", "--nccl", "--gpu-node"),
                            r'"reported": 56\b.*"nccl": true, "nccl_findings": \["NCCL020", "NCCL024"\]'),
    "storage_cost.py": Smoke(("--nproc", "2", "--pairs", "1", "--dir", "{tmp}"), r"without: wall median"),
    "store_exchange.py": Smoke(("--ranks", "16", "--procs", "2"), r'"collected": 15, .*"bad": 0'),
    "store_joins.py": Smoke(("--clients", "16"), r'"clients": 16, .*"failed": 0'),
    "store_scale.py": Smoke(("--ranks", "64", "--clients", "2"), r'"collected": 63, "bad": 0'),
}

# The benchmarks (or modes) that only a GPU can run: (file, arguments) -> what their one line names.
GPU_ONLY: dict[str, tuple[str, ...]] = {
    "gpu_session.sh": (),
    "inprocess_device.py": (),
    "node_wave2.py": (),
    "device_fidelity.py": ("--device", "cuda"),
    "probe_fidelity.py": ("--backend", "nccl"),
}


def _command(name: str, args: tuple[str, ...], launcher: tuple[str, ...] = ()) -> list[str]:
    script = str(BENCHMARKS / name)
    if name.endswith(".sh"):
        return ["bash", script, *args]
    return [sys.executable, *launcher, script, *args]


def _run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # The venv's bin first: a benchmark that starts `python3` or `torchrun` gets this project's.
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OUT": str(tmp_path / "out")}
    if command[0] == sys.executable:  # `python SCRIPT.py ...`: forked from the zygote (torch imported once)
        return run_python(command[1:], env, timeout=TIMEOUT_S, cwd=str(ROOT))
    return subprocess.run(command, cwd=ROOT, env=base_env(env), capture_output=True, text=True, timeout=TIMEOUT_S)


def test_every_benchmark_is_smoked() -> None:
    """Each file in benchmarks/ has a tiny run here or is GPU-only (then its no-GPU line is checked)."""
    files = {p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")}
    assert files == set(SMOKE) | set(GPU_ONLY), "benchmarks without a smoke run, or entries without a file"


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_benchmarks_smoke(name: str, tmp_path: Path) -> None:
    """The benchmark runs to its result line at a tiny size."""
    smoke = SMOKE[name]
    if "root" in smoke.needs:
        require_root()
        require_tool("ip")
    if "chromium" in smoke.needs:
        require_tool("chromium")
        require_tool("chromedriver")
    args = tuple(a.replace("{tmp}", str(tmp_path)) for a in smoke.args)
    done = _run(_command(name, args, smoke.launcher), tmp_path)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if smoke.prints:
        assert re.search(smoke.prints, done.stdout, re.MULTILINE), f"{name} printed:\n{done.stdout[-2000:]}"


@pytest.mark.parametrize("name", sorted(GPU_ONLY))
def test_benchmarks_smoke_gpu_only_says_it_needs_a_gpu(name: str, tmp_path: Path) -> None:
    """Without a GPU a GPU-only benchmark says so in one line and exits 2 (no traceback, nothing installed)."""
    import torch

    if torch.cuda.is_available() or (shutil.which("nvidia-smi") and name.endswith(".sh")):
        pytest.skip("a GPU is here: benchmarks/gpu_session.sh runs these for real")
    done = _run(_command(name, GPU_ONLY[name]), tmp_path)
    assert done.returncode == 2, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a GPU" in lines[0], done.stderr[-3000:]
    assert not (tmp_path / "out").exists()  # stopped before it wrote anything
