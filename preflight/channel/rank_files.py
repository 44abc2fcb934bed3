"""Step 4's second channel: the shared `--out-dir` folder, for ranks that cannot reach the store.

Every rank writes its payload there too (`rank-<r>.<nonce>.json`, named by the run's nonce,
channel/store_open.py's `agree_nonce`); rank 0 publishes go and verdict there (the nonce inside).
So a reused folder's files from an earlier run are never read as this run's: rank 0 ignores
them and says so (RUN009). A rank that could not reach the store has no nonce and writes
`rank-<r>.json`, which rank 0 accepts only when it was written after rank 0 itself started
(minus CLOCK_SKEW_S). Files are written whole (a temporary file renamed over the target).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preflight.channel.board import BadValue, decode_value
from preflight.channel.collected import Collected, accept
from preflight.channel.keys import Key

CLOCK_SKEW_S = 5.0  # a nonce-less file written this long before rank 0 started may still be this run's


def run_folder(out_dir: str, run_id: str) -> Path:
    """The run's folder under --out-dir (the run id made safe as a file name)."""
    return Path(out_dir, "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id) or "run")


def rank_file(rank: int, nonce: str) -> str:
    """A rank's payload in --out-dir: named by the run's nonce, bare when the rank has none."""
    return f"rank-{rank}.{nonce}.json" if nonce else f"rank-{rank}.json"


def take(collected: Collected, folder: Path, world_size: int, nonce: str, started: float) -> None:
    """Rank 0: accept every payload of this run the folder holds for a rank not yet heard from."""
    if not folder.is_dir():
        return
    heard = collected.heard()
    for rank in range(world_size):
        if rank in heard:
            continue
        ours = folder / rank_file(rank, nonce)
        bare = folder / rank_file(rank, "")  # a rank that never reached the store
        try:
            if nonce and ours.is_file():
                accept(collected, rank, ours.read_bytes())
            elif bare.is_file() and bare.stat().st_mtime >= started - CLOCK_SKEW_S:
                accept(collected, rank, bare.read_bytes())
        except OSError:
            continue


def stale(folder: Path, nonce: str, started: float) -> list[str]:
    """--out-dir payload files of another run (another nonce, or bare and older than this run)."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob("rank-*.json"):
        parts = path.name.split(".")
        if path.name.endswith("-report.json") or len(parts) not in (2, 3):
            continue  # a rank's own report (rank 0 was lost), read by people, not by rank 0
        try:
            if parts[1] != nonce if len(parts) == 3 else path.stat().st_mtime < started - CLOCK_SKEW_S:
                found.append(path.name)
        except OSError:
            continue
    return sorted(found)


def read_decision(folder: Path, key: Key[Any], nonce: str, started: float) -> Any:
    """A decision (keys.GO, keys.VERDICT) rank 0 wrote into the folder for this run, as the key's type;
    None when there is none (or it is another run's), BadValue when it does not decode."""
    path = folder / f"{key}.json"
    try:
        if path.stat().st_mtime < started - 1:
            return None
        limit = key.family.max_bytes or 2**16
        with path.open("rb") as stream:  # at most one byte past the limit: the decode refuses it, unread
            value = decode_value(stream.read(limit + 1), key.family.type, key, -1, limit)
    except OSError:
        return None
    # Knowing this run's nonce, a decision of another run (a reused folder) is not ours: ignored.
    if isinstance(value, BadValue) or not nonce or value.nonce == nonce:
        return value
    return None


