"""channel/keys.py: every key family one typed row, and nothing a foreign client writes under one crashes a rank.

The table's own rules first (a row's key carries its type; the board refuses a bare string).
Then real env:// ranks on a real TCPStore with a foreign client (tests/helpers/store_forger.py)
in rank 2's place writing a value of the wrong type (`[1]`, `{}`, `"x"`, a 10 MB string, which the
store itself refuses, so an 8 MiB one) under
`go`, `verdict` and the owner mark: no rank prints a traceback, rank 0's report names each key
(RUN010), and every rank exits with a documented code (3: failed, 4: incomplete).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.model.messages import Verdict
from preflight.reports.json import load as load_report
from tests.helpers.ranks import free_port, plant_env, start_rank, wait_for_ranks, what_ranks_said

FORGER = Path(__file__).resolve().parents[1] / "helpers" / "store_forger.py"


def test_a_rows_key_carries_its_type_and_the_board_reads_nothing_else() -> None:
    board = Board(dist.HashStore())
    board.put(keys.VERDICT.key, Verdict(3, "failed"))
    assert board.read(keys.VERDICT.key, 0) == Verdict(3, "failed")
    assert keys.ROUND_TIMES.at(2, 5) == "gt/2/t/5" and keys.ROUND_TIMES.at(2, 5).family is keys.ROUND_TIMES
    with pytest.raises(TypeError, match="is not a key of channel/keys"):
        board.read("verdict", 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a counter"):
        board.count(keys.VERDICT.key)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes 2 field"):
        keys.ROUND_TIMES.at(2)


def test_no_key_of_one_row_matches_another_rows_pattern() -> None:
    """Two rows whose keys could collide would read one family's value as another's type."""
    def pattern(row: keys.Family) -> re.Pattern[str]:  # a field matches one path segment
        return re.compile("[^/]+".join(re.escape(part) for part in re.split(r"\{\w+\}", row.pattern)) + "$")

    for row in keys.TABLE:
        fields = row.pattern.count("{")
        sample = row.at(*(["x"] * fields)) if fields else row.key
        assert [other.pattern for other in keys.TABLE if pattern(other).match(sample)] == [row.pattern]


def test_an_exit_code_preflight_never_gives_is_no_verdict() -> None:
    store = dist.HashStore()
    store.set(keys.VERDICT.key, b'{"exit_code": 7}')
    value = Board(store).read(keys.VERDICT.key, -1)
    assert isinstance(value, BadValue) and "exit code 7" in value.line() and "'verdict'" in value.line()


@pytest.mark.parametrize(("shape", "secret"), [("list", ""), ("dict", ""), ("str", ""), ("10MB", ""),
                                               ("list", "this-job"), ("10MB", "this-job")],
                         ids=["[1]", "{}", "x", "10MB", "[1] with a secret", "10MB with a secret"])
def test_a_wrong_typed_value_under_go_verdict_and_owner_is_refused_named_and_every_rank_exits_true(
        tmp_path: Path, shape: str, secret: str) -> None:
    """Ranks 0, 1 and 3 start; the forger waits for rank 1's claim, writes, exits; then rank 3 joins (and
    finds the owner mark forged: PORT004, exit 4). Rank 0 misses ranks 2 and 3 (exit 3) and names the
    three keys (RUN010); rank 1 exits with rank 0's code, or 4 where rank 0's never reached it."""
    report_path, forged_flag, ready_flag = tmp_path / "r.json", tmp_path / "forged", tmp_path / "forger-ready"
    # Rank 3 starts with the others (its imports take seconds), then waits for the forgery before it joins.
    # Rank 0 waits until the forger has imported torch: its --timeout (15 s) must cover the forgery and
    # rank 3's join, not the forger's imports too (on a loaded machine rank 0 once gave up before rank 3
    # came, and rank 3 found no store: "cannot reach rank 0" instead of PORT004). Rank 1 waits for it too:
    # its own 15 s to reach rank 0's store ran out while rank 0 waited for the forger (CI, stop 50: rank 1
    # left, nobody claimed rank 1, and the forger found rank 0's store closed).
    wait_for = """
        import pathlib, time
        import torch.distributed
        deadline = time.monotonic() + 120
        while not pathlib.Path({flag!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    """
    ready, forged_plant = wait_for.format(flag=str(ready_flag)), wait_for.format(flag=str(forged_flag))
    plant = plant_env(tmp_path, {0: ready, 1: ready, 3: forged_plant})
    common = {"PYTHONPATH": os.pathsep.join([plant["PYTHONPATH"], str(FORGER.parents[2])]),
              "FORGER_READY": str(ready_flag), **({"PREFLIGHT_SECRET": secret} if secret else {})}
    args = ["run", "--skip", "probe", "--timeout", "15", "--json", str(report_path)]
    port, started = free_port(), time.monotonic()
    procs = {rank: start_rank(rank, 4, args, common_env=common, port=port) for rank in (0, 1, 3)}
    forger = start_rank(2, 4, ["2", "innocent", shape], common_env=common, port=port, program=[str(FORGER)])
    forged = wait_for_ranks({2: forger}, started, timeout=120)[2]
    forged_flag.touch()
    if forger.returncode != 0 or "wrote" not in forged.stdout:  # what the ranks said too: why rank 1 never claimed
        said = wait_for_ranks(procs, started, timeout=150)
        pytest.fail(forged.stdout + forged.stderr[-2000:] + what_ranks_said(said))
    # Over 8 MiB the store itself drops the writer; the forger then writes an 8 MiB string, over every
    # decision's bound (keys.SMALL), so the ranks refuse it unparsed.
    assert ("the store refused" in forged.stdout) == (shape == "10MB")
    runs = wait_for_ranks(procs, started, timeout=150)
    for rank, run in runs.items():
        assert "Traceback" not in run.stdout + run.stderr, (rank, run.stdout[-2000:], run.stderr[-2000:])
    report = load_report(report_path)
    refused = {f.data["key"]: f.message for f in report.findings if f.check_id == "RUN010"}
    assert set(refused) == {"go", "verdict", "preflight/owner"}, [f.message for f in report.findings]
    for key, message in refused.items():
        assert repr(key) in message and (not secret or "forged" in message), message
    assert report.exit_code == 3 and runs[0].returncode == 3
    assert runs[1].returncode in (3, 4), runs[1].stdout[-1500:]
    assert runs[3].returncode == 4 and "PORT004" in runs[3].stdout and "'preflight/owner'" in runs[3].stdout, \
        runs[3].stdout[-1500:]
    assert ("forged" in runs[3].stdout) == bool(secret)
