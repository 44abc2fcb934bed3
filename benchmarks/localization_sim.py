"""Localization at scale, simulated: rounds and tests group testing needs to name k bad hosts among N.

    .venv/bin/python benchmarks/localization_sim.py                      # N 64,512,4096; k 1,2,4
    .venv/bin/python benchmarks/localization_sim.py --hosts 4096 --bad 4 --trials 50 --good 8

A model of the cluster, not a cluster: each host has a true bandwidth (1.0 healthy; a bad host
is drawn between 0.1 and 0.6 of it); a test of a pool (`preflight.probes.grouptest.locate`
calls it with every pool of a round) measures the pool with its known-good partner as its
slowest member's bandwidth times per-host lognormal noise (sigma 0.05: one iteration's spread
on a healthy fabric) and, with probability --stall, a stall that halves the figure (a
descheduled process, a busy link); the pool is slow below --ratio (0.8) of healthy. The
same `locate` the probes use runs on it, so the figures are the algorithm's, under noise.
Each line: N, k, the rounds and tests it took (median and max over trials), the round robin's
n-1 rounds for comparison, and how many trials named exactly the bad hosts.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from preflight.probes.grouptest import locate


def simulate(n: int, k: int, *, good: int, ratio: float, sigma: float, stall: float,
             rng: random.Random) -> tuple[int, int, bool]:
    """One trial: (rounds, tests, named exactly the bad hosts)."""
    bad = set(rng.sample(range(n), k))
    speed = {h: (rng.uniform(0.1, 0.6) if h in bad else 1.0) for h in range(n)}

    def test(pools: list[list[int]]) -> list[bool]:
        out = []
        for pool in pools:
            figure = min(speed[h] * math.exp(rng.gauss(0.0, sigma)) for h in pool)
            if rng.random() < stall:
                figure *= 0.5
            out.append(figure < ratio)
        return out

    found = locate(list(range(n)), good, test)
    return found.rounds, found.tests, set(found.bad) == bad


def main(argv: list[str] | None = None) -> int:
    """Print rounds and tests per (N, k) over --trials seeded trials."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="64,512,4096")
    parser.add_argument("--bad", default="1,2,4")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--good", type=int, default=8, help="known-good hosts: pools measured at once")
    parser.add_argument("--ratio", type=float, default=0.8)
    parser.add_argument("--sigma", type=float, default=0.05)
    parser.add_argument("--stall", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"good={args.good} ratio={args.ratio} sigma={args.sigma} stall={args.stall} trials={args.trials}")
    print(f"{'N':>5} {'k':>2} {'rounds med':>10} {'rounds max':>10} {'tests med':>9} {'tests max':>9} "
          f"{'k*log2N':>7} {'round robin':>11} {'exact':>7}")
    for n in (int(x) for x in args.hosts.split(",")):
        for k in (int(x) for x in args.bad.split(",")):
            runs = [simulate(n, k, good=args.good, ratio=args.ratio, sigma=args.sigma, stall=args.stall, rng=rng)
                    for _ in range(args.trials)]
            rounds, tests = [r for r, _, _ in runs], [t for _, t, _ in runs]
            exact = sum(ok for _, _, ok in runs)
            print(f"{n:>5} {k:>2} {statistics.median(rounds):>10g} {max(rounds):>10} {statistics.median(tests):>9g} "
                  f"{max(tests):>9} {k * math.log2(n):>7.0f} {n - 1:>11} {exact:>4}/{args.trials}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
