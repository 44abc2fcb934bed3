"""The runner's logic with every rank in one process: one thread per rank, one torch import.

Each thread runs the real steps (`preflight.runner.run`) with its own launcher variables,
against a real c10d TCPStore that rank 0 hosts on loopback: only the process boundary is
gone, so these tests cost a fraction of the multi-process ones in test_runner.py, which keep
what needs real processes (signals, the shared directory, launchers).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from preflight.lib.torch_import import import_torch_distributed
from preflight.model import ExitCode
from preflight.options import RunOptions
from preflight.registry import JobView
from preflight.reports.json import load as load_report
from preflight.runner import run
from tests.helpers.ranks import free_port

# A does-not-hang bound with generous headroom: the runs themselves take a few seconds.
JOIN_S = 120.0


def run_ranks(world_size: int, options: RunOptions, *, absent: tuple[int, ...] = (),
              env: dict[int, dict[str, str]] | None = None) -> dict[int, int]:
    """Run ranks 0..world_size-1 (but `absent`) as threads of this process; rank -> exit code."""
    import_torch_distributed()
    port = str(free_port())
    codes: dict[int, int] = {}

    def one_rank(rank: int) -> None:
        launcher = {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                    "PREFLIGHT_JOB_ID": f"inprocess-{port}", **(env or {}).get(rank, {})}
        codes[rank] = run(options, env=launcher)

    threads = [threading.Thread(target=one_rank, args=(r,), daemon=True)
               for r in range(world_size) if r not in absent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "a rank thread did not finish"
    return codes


def options(tmp_path: Path, **overrides: object) -> RunOptions:
    """Checks only (no probes: a process group is once per process), quiet, JSON to tmp_path/r.json."""
    fields: dict[str, object] = {"skip": ["probe"], "timeout_s": 20.0, "json": str(tmp_path / "r.json"), "quiet": True}
    fields.update(overrides)
    return RunOptions.build(**fields)


def test_clean_ranks_pass_and_every_rank_shares_the_verdict(tmp_path: Path) -> None:
    codes = run_ranks(4, options(tmp_path))
    assert codes == {0: 0, 1: 0, 2: 0, 3: 0}
    report = load_report(tmp_path / "r.json")
    assert [f.rank for f in report.ranks] == [0, 1, 2, 3] and report.verdict == "passed"
    assert list(report.meta.phases) == ["facts", "local checks", "exchange", "collect", "reachability",
                                        "cross checks"]


def test_a_missing_rank_fails_the_run_and_is_named(tmp_path: Path) -> None:
    codes = run_ranks(3, options(tmp_path, timeout_s=3.0), absent=(2,))
    assert codes == {0: int(ExitCode.FAILED), 1: int(ExitCode.FAILED)}
    report = load_report(tmp_path / "r.json")
    assert report.missing_ranks == [2]
    assert [f.ranks for f in report.findings if f.check_id == "RANK001"] == [[2]]


def test_a_layout_fault_fails_the_run_and_silence_drops_it(tmp_path: Path) -> None:
    two_zeros = {1: {"LOCAL_RANK": "0"}}  # two ranks of one host bind local rank 0 (one GPU)
    codes = run_ranks(2, options(tmp_path), env=two_zeros)
    assert codes == {0: int(ExitCode.FAILED), 1: int(ExitCode.FAILED)}
    report = load_report(tmp_path / "r.json")
    [duplicate] = [f for f in report.findings if f.check_id == "LAYOUT001"]
    assert duplicate.ranks == [0, 1]
    codes = run_ranks(2, options(tmp_path, silence=["LAYOUT001"]), env=two_zeros)
    assert codes == {0: 0, 1: 0}
    assert not [f for f in load_report(tmp_path / "r.json").findings if f.check_id == "LAYOUT001"]


def test_rank_0_runs_its_cross_checks_and_builds_and_writes_its_report_with_the_collector_paused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What rank 0 allocates there is acyclic: an automatic full collection would only rescan it (a
    131,072-rank job on GPU hosts: 12 of them, 1.4 CPU-s, nothing freed). The collector is back after."""
    import preflight.runner as runner

    seen: dict[str, list[bool]] = {"cross checks": [], "report": [], "write": []}

    def noting(name: str, func: Callable[..., Any], rank_0_only: bool = False) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not rank_0_only or isinstance(args[1], JobView):  # the local checks run on every rank
                seen[name].append(gc.isenabled())
            return func(*args, **kwargs)
        return call

    monkeypatch.setattr(runner, "run_checks", noting("cross checks", runner.run_checks, rank_0_only=True))
    monkeypatch.setattr(runner, "build_report", noting("report", runner.build_report))
    monkeypatch.setattr(runner, "write_reports", noting("write", runner.write_reports))
    assert gc.isenabled()
    assert run_ranks(2, options(tmp_path)) == {0: 0, 1: 0}
    assert seen == {"cross checks": [False], "report": [False], "write": [False]}
    assert gc.isenabled()
