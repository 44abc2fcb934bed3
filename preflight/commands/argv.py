"""What argparse would say badly about a command line, said plainly before it parses it.

argparse reads a value that starts with `-` as another flag: `--sizes -1M` was "expected one
argument". And `preflight run -n 4` was "unrecognized arguments: -n 4", though the user meant the
ranks that `preflight launch -n 4` starts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from preflight.lib.errors import BadInput

LAUNCH_FLAGS = ("-n", "--nproc-per-node", "--nproc_per_node", "--nnodes")


def attach_dashed_values(argv: Sequence[str], value_flags: Collection[str], known: Collection[str]) -> list[str]:
    """`--sizes -1M` -> `--sizes=-1M` for a flag that takes a value, when the next word is no known flag:
    the value then reaches the option's own reader, which says what is wrong with it in one line."""
    out: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        following = words[i + 1] if i + 1 < len(words) else ""
        if word in value_flags and following.startswith("-") and following.split("=")[0] not in known:
            out.append(f"{word}={following}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def refuse_launch_flags_on_run(argv: Sequence[str]) -> None:
    """`preflight run -n 4`: run is one rank of a job some launcher started; launch starts the ranks."""
    if not argv or argv[0] != "run":
        return
    for word in argv[1:]:
        flag = word.split("=")[0]
        if flag in LAUNCH_FLAGS:
            raise BadInput(f"`preflight run` has no {flag}: it is one rank of a job its launcher started; to start "
                           f"the ranks on this machine, `preflight launch -n N ...` (or srun, torchrun, mpirun)")
