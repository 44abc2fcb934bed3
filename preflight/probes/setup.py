"""Communicator setup under a deadline of its own, and who held it up.

With `device_id` (eager init) `init_process_group` and every `new_group` block in NCCL's
ncclCommInitRank until all ranks of the group have connected. No torch timeout covers that
wait: the process-group timeout bounds the store exchange of the NCCL id, not NCCL's own
bootstrap. A GPU that hangs in context creation (cuda.set_device) is just as unbounded.
So session.open_session runs in a helper thread (liveness.bounded, which also gives up at
once when a peer is known dead), joined until the deadline; when it is not back by then, this
rank stops waiting and reports, and its process leaves by os._exit once the verdict is out
(the thread may never return).

Each rank records in the store which setup stage it has reached. A rank has no record when
it never reached setup. When setup times out, rank 0 blames the ranks furthest behind. When
every rank is inside the same stage, nobody is singled out: NCCL's bootstrap could not
connect them, which is a network finding, not a rank's.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec import Struct

from preflight.channel import keys
from preflight.channel.board import Board
from preflight.model.messages import SetupStage

# Stages of session.open_session in order; "done" is set by the caller once it returned.
STAGES = ("started", "bind GPU", "process group", "control group", "DeviceMesh", "world group", "done")
# Beyond the process-group timeout (probe timeout + 5 s): a store wait's own error, which
# says what it waited for, comes first where there is one; this deadline catches the rest.
SETUP_GRACE_S = 10.0
MAX_BLAMED_LOOKUPS = 4096  # store lookups rank 0 makes to name laggards (one per rank)



class SetupTimeout(Exception):
    """Communicator setup was not back before its deadline (the helper thread may still be inside it).

    Raised as liveness.StillRunning, its subclass, by liveness.bounded.
    """


stage_key = keys.SETUP.at  # the store key holding the setup stage a rank has reached


def marker(board: Board, rank: int, host: str) -> Callable[[str], None]:
    """A function that records this rank's setup stage (and its host, for the report) in the store."""
    def mark(stage: str) -> None:
        board.put(stage_key(rank), SetupStage(stage, host))
    return mark


class SetupBlame(Struct):
    """Who held setup up: ranks blamed with why, ranks that were waiting, and the stage all were in."""

    culprits: dict[int, str]
    waiting: list[int]
    common_stage: str = ""  # every unfinished rank inside this one stage: nobody singled out


def read_stages(board: Board, world_size: int) -> tuple[dict[int, str], dict[int, str]]:
    """Each rank's recorded setup stage and host; ranks with none, or with a value that is no
    stage, are left out (one chunked fetch of at most MAX_BLAMED_LOOKUPS keys)."""
    stages: dict[int, str] = {}
    hosts: dict[int, str] = {}
    ranks = list(range(min(world_size, MAX_BLAMED_LOOKUPS)))
    for rank, value in zip(ranks, board.fetch([stage_key(r) for r in ranks], ranks), strict=True):
        if isinstance(value, SetupStage):
            stages[rank], hosts[rank] = value.stage, value.host[:255]
    return stages, hosts


def blame(stages: dict[int, str], world_size: int) -> SetupBlame:
    """The ranks furthest behind in setup are blamed; every other unfinished or finished rank was waiting."""
    order = {stage: i for i, stage in enumerate(STAGES)}
    position = {r: order.get(stages.get(r, ""), -1) for r in range(min(world_size, MAX_BLAMED_LOOKUPS))}
    unfinished = [r for r, p in position.items() if p < order["done"]]
    if not unfinished:
        return SetupBlame({}, [])
    behind = min(position[r] for r in unfinished)
    laggards = [r for r in unfinished if position[r] == behind]
    others = sorted(r for r in position if r not in laggards)
    if not others:  # every rank inside the same stage: the ranks could not connect to each other
        return SetupBlame({}, laggards, common_stage=STAGES[behind] if behind >= 0 else "")
    why = "never reached communicator setup" if behind < 0 else f"still in setup stage '{STAGES[behind]}'"
    return SetupBlame({r: why for r in laggards}, others)
