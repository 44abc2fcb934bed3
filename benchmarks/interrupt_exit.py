"""How soon every rank is gone after a signal or a death, N runs per scenario (issues 32 and 36).

    .venv/bin/python benchmarks/interrupt_exit.py --runs 10
    .venv/bin/python benchmarks/interrupt_exit.py --runs 1 --scenario matrix   # every phase x signal x launcher

Not a speed benchmark but the repetition the suite keeps short (tests/channel/test_leaving.py,
tests/commands/test_interrupts.py run each case once, with "does not hang" bounds):

- sigterm-all: SIGTERM to every env:// rank (4) while the probes' all_reduce runs; seconds from
  the signal until each rank is gone (target: every rank, rank 0 included, within 2 s), exit codes.
- killed-in-exchange: `preflight launch -n 4 --start-method exec`, rank 2 SIGKILLs itself once
  the others published; seconds rank 0 is gone after the last other rank (target: within 2 s).
- matrix: SIGINT and SIGTERM at each phase under each launcher (forkserver, exec, env://):
  seconds until every process is gone, exit codes, tracebacks or agent lines on stderr.
- sigterm-setup (issue 47): 4 env:// ranks, `--mesh dp2,tp2`, rank 3 held inside init_device_mesh,
  so the others' set-up threads wait inside torch's group creation; SIGTERM to every rank 1 s after
  rank 0 gave up on the set-up and read the stages (a plant says when and holds it there): seconds
  until each rank is gone (target: 2 s). Before, rank 0 waited for the set-up thread's store client.
- rank0-killed (issue 47): 4 env:// ranks, `--timeout 5 --out-dir`, rank 0 (held in reachability by
  a plant) SIGKILLed: seconds until the last other rank is gone (target: --timeout + 2 s = 7 s).

No plants that change preflight's timing: the figures are the real behaviour. One JSON line per
run, then a summary per scenario with the load average before and after (docs/testing.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.channel.test_leaving import kill_one_rank_in_the_exchange_under_launch, sigterm_every_rank_mid_probes
from tests.channel.test_rank_0_gone import TIMEOUT_S, kill_rank_0_while_the_others_wait
from tests.commands.test_interrupts import PHASES, interrupt
from tests.probes.test_setup_clients import sigterm_after_set_up_given_up


def sigterm_all(folder: Path) -> dict:
    ranks = sigterm_every_rank_mid_probes(folder, plant=False)
    return {"rank0_s": round(ranks[0][0], 2), "others_max_s": round(max(t for r, (t, _) in ranks.items() if r), 2),
            "codes": sorted({code for _, code in ranks.values()})}


def killed_in_exchange(folder: Path) -> dict:
    after, code, _ = kill_one_rank_in_the_exchange_under_launch(folder, plant=False)
    last_other = max(t for r, t in after.items() if r not in (0, 2))
    return {"rank0_after_last_other_s": round(after[0] - last_other, 2), "launch_code": code}


def sigterm_setup(folder: Path) -> dict:
    gone, codes, _, _ = sigterm_after_set_up_given_up(folder)
    return {"rank0_s": round(gone[0], 2), "others_max_s": round(max(t for r, t in gone.items() if r), 2),
            "codes": sorted(set(codes.values()))}


def rank0_killed(folder: Path) -> dict:
    gone, output = kill_rank_0_while_the_others_wait(folder, out_dir=True)
    return {"last_other_gone_s": round(max(gone.values()), 2), "timeout_s": TIMEOUT_S,
            "said_rank_0_gone": output.count("rank 0 is gone")}


def matrix(folder: Path) -> list[dict]:
    rows = []
    for launcher in ("forkserver", "exec", "env"):
        for phase in PHASES:
            if launcher == "forkserver" and phase not in ("start-up", "probes"):
                continue  # a forked rank runs no plant: only the phases its progress lines show
            for sig in (signal.SIGINT, signal.SIGTERM):
                sub = folder / f"{launcher}-{phase}-{sig.name}"
                sub.mkdir()
                run = interrupt(sub, launcher, phase, sig)
                rows.append({"launcher": launcher, "phase": phase, "signal": sig.name,
                             "all_gone_s": round(max(run.gone_after_s.values()), 2),
                             "codes": sorted(set(run.codes.values())),
                             "traceback": "Traceback" in run.stderr, "death_signal": "death signal" in run.stderr,
                             "report_exit": (run.report or {}).get("exit_code")})
                print(json.dumps(rows[-1]), flush=True)
    return rows


SCENARIOS = {"sigterm-all": sigterm_all, "killed-in-exchange": killed_in_exchange, "sigterm-setup": sigterm_setup,
             "rank0-killed": rank0_killed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--scenario", action="append", choices=[*SCENARIOS, "matrix"],
                        help="default: sigterm-all and killed-in-exchange")
    args = parser.parse_args()
    scenarios = args.scenario or ["sigterm-all", "killed-in-exchange"]
    load_before = os.getloadavg()
    summary = {}
    for name in scenarios:
        results = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as folder:
                if name == "matrix":
                    results += matrix(Path(folder))
                    continue
                result = SCENARIOS[name](Path(folder))
                results.append(result)
                print(json.dumps({"scenario": name, **result}), flush=True)
        if name in ("sigterm-all", "sigterm-setup"):
            worst = [max(r["rank0_s"], r["others_max_s"]) for r in results]
            summary[name] = {"runs": len(results), "rank0_s_median": statistics.median(r["rank0_s"] for r in results),
                             "all_gone_s_max": max(worst), "within_2s": sum(w <= 2.0 for w in worst),
                             "codes": sorted({c for r in results for c in r["codes"]})}
        elif name == "killed-in-exchange":
            lag = [r["rank0_after_last_other_s"] for r in results]
            summary[name] = {"runs": len(results), "rank0_after_last_other_s_median": statistics.median(lag),
                             "max": max(lag), "within_2s": sum(x <= 2.0 for x in lag)}
        elif name == "rank0-killed":
            last = [r["last_other_gone_s"] for r in results]
            summary[name] = {"runs": len(results), "last_other_gone_s_median": statistics.median(last),
                             "max": max(last), "within_timeout_plus_2s": sum(x <= TIMEOUT_S + 2 for x in last)}
        else:
            summary[name] = {"runs": len(results), "all_gone_s_max": max(r["all_gone_s"] for r in results),
                             "within_2s": sum(r["all_gone_s"] <= 2.0 for r in results),
                             "clean": sum(not r["traceback"] and not r["death_signal"] for r in results)}
    print(json.dumps({"summary": summary, "load_before": [round(x, 1) for x in load_before],
                      "load_after": [round(x, 1) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
