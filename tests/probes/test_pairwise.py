"""preflight/probes/pairwise.py: localization exchanges on the group it is handed (the probe's own
backend), not on the control group, with two real gloo ranks.

On a gloo job the probe group and the control group are both gloo, so the end-to-end probe tests
cannot tell them apart; here they are two distinct gloo groups, and each group's own collective
sequence number (torch counts every op issued on a group, send/recv included) says which one
carried the exchange.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.helpers.ranks import start_script_ranks

SCRIPT = textwrap.dedent("""
    import json, sys
    from datetime import timedelta
    import torch.distributed as dist
    from preflight.probes.pairwise import run_rounds
    rank, store_path = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    control, probe = dist.new_group(backend="gloo"), dist.new_group(backend="gloo")
    times = run_rounds(rank, [0, 1], 4096, 3, control, 30.0, group=probe, device="cpu")
    print(json.dumps({"peers": list(times), "probe_ops": probe._get_sequence_number_for_group(),
                      "control_ops": control._get_sequence_number_for_group()}))
""")


def test_the_exchange_runs_on_the_group_handed_to_it_and_only_barriers_on_the_control_group(tmp_path: Path) -> None:
    procs = start_script_ranks(SCRIPT, 2, tmp_path / "store")
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-800:] for _, err in outs]
    for rank, (stdout, _) in enumerate(outs):
        got = json.loads(stdout.strip().splitlines()[-1])
        assert got["peers"] == [1 - rank]
        # one warm-up and 3 timed exchanges, each a send and a receive, all on the probe group
        assert got["probe_ops"] == 2 * (1 + 3), got
        assert got["control_ops"] == 2, got  # the round's barrier and the closing one
