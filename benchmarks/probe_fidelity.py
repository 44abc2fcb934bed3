"""Probe fidelity: preflight's busbw against a bare timing loop of the same op, size and iterations.

For every op of probes/ops.py. The bare loop is the all_reduce_bench / nccl-tests method:
warm-up, barrier, time N back-to-back calls of the plain torch.distributed function, one
synchronisation, slowest rank's total / N. preflight's figure comes from its own probe code
path (session.open_session + run_steps with the plan a run uses, then collect.results on
rank 0). Both run in the same processes, on the same process group and buffers' sizes, with
the same untimed run-up (the probe's checked call and warm-up; warm-up + 1 calls for the bare
loop), each twice per round in mirrored order (preflight, bare, bare, preflight; the next round
the other way round), a side's round figure the mean of its two; the ratio is the median of the
rounds' own ratios (preflight / bare, paired by round), printed beside each side's median. Not
a test: it prints the ratio per op (goal >= 0.97).

With --backend nccl every rank shares GPU 0 under its own NCCL_HOSTID (NCCL then treats the
ranks as separate hosts and connects them over its network transport), so one GPU measures
the same loop both ways; the bare loop synchronises the device before reading the clock.

    python benchmarks/probe_fidelity.py [--ranks 4] [--size 16MiB] [--iters 60] [--rounds 5] [--ops all_reduce,...]
    python benchmarks/probe_fidelity.py --tiny        # 2 ranks, 64 KiB, 2 iterations, 1 round (a smoke run)
    python benchmarks/probe_fidelity.py --backend nccl --ranks 2 --size 256MiB
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from preflight.lib.mesh_shape import MeshDim
from preflight.model import World
from preflight.options import parse_size
from preflight.probes import collect, ops, session, steps
from preflight.probes.plan import ProbePlan


def _bare_call(op: str, b: ops.Buffers, group: Any, ranks: list[int], me: int) -> Callable[[], None]:
    """The plain synchronous torch call anyone would time (no preflight code in the loop)."""
    if op == "all_reduce":
        return lambda: dist.all_reduce(b.send, group=group)
    if op in ("all_gather", "reduce_scatter"):  # the newest name this torch has, as ops.py picks it
        fn = next(getattr(dist, name) for name in ops.row(op).torch_names if hasattr(dist, name))
        return lambda: fn(b.recv, b.send, group=group)
    if op == "all_to_all":
        return lambda: dist.all_to_all_single(b.recv, b.send, group=group)
    if op == "broadcast":
        return lambda: dist.broadcast(b.send, src=ranks[0], group=group)

    def send_recv() -> None:  # adjacent stages, all pairs at once, as ops.py runs it
        works = []
        if me + 1 < len(ranks):
            works.append(dist.isend(b.send, dst=ranks[me + 1], group=group))
        if me > 0:
            works.append(dist.irecv(b.recv, src=ranks[me - 1], group=group))
        for work in works:
            work.wait()
    return send_recv


def _bare(op: str, size: int, iters: int, warmup: int, ses: session.Session) -> float:
    """busbw of a plain loop, as all_reduce_bench measures it (slowest rank's total / iters)."""
    group, ranks, _ = ses.groups["world"]
    me, n = ranks.index(dist.get_rank()), len(ranks)
    bufs = ops.make_buffers(op, size, me, n, ses.dtype, ses.device)
    call = _bare_call(op, bufs, group, ranks, me)
    # ses.device is torch.device("cuda", k) since the probes name their GPU: compare its type, never the
    # whole device with "cuda" (that compared False on a GPU, and the loop timed its launches alone).
    sync = (lambda: torch.cuda.synchronize(ses.device)) if ses.kind == "cuda" else (lambda: None)
    for _ in range(warmup):
        call()
    sync()
    dist.barrier(group=group)
    began = time.perf_counter()
    for _ in range(iters):
        call()
    sync()
    elapsed = torch.tensor([time.perf_counter() - began], device=ses.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
    return ops.busbw_gbps(op, n, bufs.nbytes, elapsed.item() / iters)


def _preflight(op: str, size: int, turn: str, dims: list[MeshDim], args: argparse.Namespace,
               ses: session.Session, base: Any) -> float:
    """busbw of preflight's own probe step on `op` (rank 0's figure from collect.results; 0.0 elsewhere)."""
    rank, n = ses.world.rank, ses.world.world_size
    # The plan a run uses (per-iteration figures: ProbePlan's default), one op at a time.
    ses.plan = ProbePlan(dims, [op], [size], args.warmup, args.iters, False)
    ses.store = dist.PrefixStore(f"{op}/{turn}", base)
    records, status = steps.run_steps(ses)
    steps.publish(ses.board, rank, ses.world.host, records, status)
    if rank != 0:
        return 0.0
    got = collect.gather(ses.board, n, 120.0)
    (result,) = collect.results(got, got.hosts())
    return result.busbw_gbps


def _worker(rank: int, n: int, port: int, args: argparse.Namespace) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    if args.backend == "nccl":
        os.environ["NCCL_HOSTID"] = f"fidelity-{rank}"  # one GPU, ranks as separate NCCL hosts
    torch.set_num_threads(1)
    base = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=60))  # the parent hosts it
    world = World("bench", rank, n, host=socket.gethostname())
    size = parse_size(args.size)
    figures: dict[str, dict[str, list[float]]] = {}
    # One world dimension: the probes' own group (new_group), which the bare loop uses as well.
    dims = [MeshDim("world", n)]
    ses = session.open_session(world, ProbePlan(dims, list(args.ops), [size], args.warmup, args.iters, False),
                               dist.PrefixStore("open", base), args.backend, 120.0)
    for round_index in range(args.rounds):
        for op in args.ops:
            # Each side twice per round, in mirrored order (ABBA; BAAB the next round), its round
            # figure the mean of the two: whatever runs later finds the allocator, the sockets and
            # the caches warmed by the same op, so a fixed order favoured the second side (the bare
            # loop, every time) and plain alternation favoured whichever went second in 3 of 5 rounds.
            order = ("preflight", "bare", "bare", "preflight")
            pair: dict[str, list[float]] = {"preflight": [], "bare": []}
            for turn, side in enumerate(order if round_index % 2 == 0 else order[::-1]):
                if side == "preflight":
                    pair[side].append(_preflight(op, size, f"{round_index}/{turn}", dims, args, ses, base))
                else:  # the same untimed run-up as the probe: its checked call and the warm-up
                    pair[side].append(_bare(op, size, args.iters, args.warmup + 1, ses))
            if rank == 0:
                for side, two in pair.items():
                    figures.setdefault(op, {}).setdefault(side, []).append(statistics.fmean(two))
    if rank == 0:
        print(f"{args.backend}, {n} ranks, {args.size}, {args.iters} iters, "
              f"{args.rounds} mirrored (ABBA) rounds (busbw GB/s, medians), load average {os.getloadavg()[0]:.1f}")
        for op, both in figures.items():
            pf, bare = statistics.median(both["preflight"]), statistics.median(both["bare"])
            # The ratio is the median of the rounds' own ratios: each round's two sides ran
            # interleaved under the same load, which swings 2x between rounds on a shared machine.
            paired = statistics.median(p / b for p, b in zip(both["preflight"], both["bare"]))
            print(f"  {op:<14} preflight {pf:.4f}  bare loop {bare:.4f}  ratio {paired:.3f} "
                  f"(ratio of the medians {pf / bare:.3f})   "
                  f"(rounds: preflight {[round(x, 3) for x in both['preflight']]}, "
                  f"bare {[round(x, 3) for x in both['bare']]})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Spawn the ranks and print the fidelity ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size", default="16MiB")
    # 60, not 20: on 2 shared cores one op's round ratio moved +-4% at 20 iterations (each of four
    # runs at load 2-4 had one op, a different one, at 0.93-0.97), +-2% at 60 (docs/performance.md).
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", default=",".join(ops.NAMES), help="comma-separated (default: every op)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: 2 ranks, 64 KiB, 2 iterations, 1 round")
    args = parser.parse_args()
    if args.backend == "nccl" and not torch.cuda.is_available():
        print("probe_fidelity.py --backend nccl needs a GPU: torch sees no CUDA device "
                         "(run --backend gloo here, or on the device machine)", file=sys.stderr)
        raise SystemExit(2)
    if args.tiny:
        args.ranks, args.size, args.iters, args.warmup, args.rounds = 2, "64KiB", 2, 1, 1
    args.ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = [op for op in args.ops if not ops.known(op)]
    if unknown:
        parser.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(ops.NAMES)}")
    # The store is hosted here, on a port the kernel picked and this process holds, before the ranks
    # start: a free port found, closed, and bound later by rank 0 could be taken meanwhile (another
    # job's store, and the ranks would join it: seen once in CI, gloo's set-up failing).
    store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60), wait_for_workers=False)
    mp.spawn(_worker, args=(args.ranks, store.port, args), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
