"""Probe fidelity: preflight's busbw against a bare timing loop of the same op, size and iterations.

The bare loop is the all_reduce_bench method: barrier, time N back-to-back calls, barrier,
slowest rank's total / N. preflight's figure comes from its own probe code path
(session.open_session + run_steps, then collect.results on rank 0: per-iteration timing,
median per rank, slowest rank). Both run in the same processes, alternating, on the same
world group. Not a test: it prints the ratio (goal >= 0.97).

With --backend nccl every rank shares GPU 0 under its own NCCL_HOSTID (NCCL then treats the
ranks as separate hosts and connects them over its network transport), so one GPU measures
the same loop both ways; the bare loop synchronises the device before reading the clock.

    python benchmarks/probe_fidelity.py [--ranks 4] [--size 16MiB] [--iters 20] [--rounds 5]
    python benchmarks/probe_fidelity.py --backend nccl --ranks 2 --size 256MiB
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from preflight.lib.mesh_shape import MeshDim
from preflight.model import World
from preflight.options import parse_size
from preflight.probes import collect, ops, session
from preflight.probes.plan import ProbePlan


def _bare(op: str, size: int, iters: int, warmup: int, n: int, ses: session.Session) -> float:
    """busbw of a plain loop, as all_reduce_bench measures it (slowest rank's total / iters)."""
    bufs = ops.make_buffers(op, size, dist.get_rank(), n, ses.dtype, ses.device)
    call = {"all_reduce": lambda: dist.all_reduce(bufs.send),
            "all_to_all": lambda: dist.all_to_all_single(bufs.recv, bufs.send)}[op]
    sync = torch.cuda.synchronize if ses.device == "cuda" else (lambda: None)
    for _ in range(warmup):
        call()
    sync()
    dist.barrier()
    began = time.perf_counter()
    for _ in range(iters):
        call()
    sync()
    elapsed = torch.tensor([time.perf_counter() - began], device=ses.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return ops.busbw_gbps(op, n, bufs.nbytes, elapsed.item() / iters)


def _worker(rank: int, n: int, port: int, args: argparse.Namespace) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    if args.backend == "nccl":
        os.environ["NCCL_HOSTID"] = f"fidelity-{rank}"  # one GPU, ranks as separate NCCL hosts
    torch.set_num_threads(1)
    base = dist.TCPStore("127.0.0.1", port, n, rank == 0, timedelta(seconds=60))
    world = World("bench", rank, n, host=socket.gethostname())
    size = parse_size(args.size)
    figures: dict[str, dict[str, list[float]]] = {}
    for op in ("all_reduce", "all_to_all"):
        plan = ProbePlan([MeshDim("world", n)], [op], [size], args.warmup, args.iters, False)
        probe_store = dist.PrefixStore(f"{op}", base)
        if not dist.is_initialized():
            ses = session.open_session(world, plan, probe_store, args.backend, 120.0)
        else:
            ses.plan = plan
        for round_index in range(args.rounds):
            ses.store = dist.PrefixStore(f"{op}/{round_index}", base)
            records, status = session.run_steps(ses)
            session.publish(ses.board, rank, world.host, records, status)
            if rank == 0:
                got = collect.gather(ses.board, n, 120.0)
                (result,) = collect.results(got, got.hosts())
                figures.setdefault(op, {}).setdefault("preflight", []).append(result.busbw_gbps)
            bare = _bare(op, size, args.iters, args.warmup, n, ses)
            if rank == 0:
                figures[op].setdefault("bare", []).append(bare)
    if rank == 0:
        print(f"{args.backend}, {n} ranks, {args.size}, {args.iters} iters, "
              f"{args.rounds} alternating rounds (busbw GB/s)")
        for op, both in figures.items():
            pf, bare = statistics.median(both["preflight"]), statistics.median(both["bare"])
            print(f"  {op:<11} preflight {pf:.4f}  bare loop {bare:.4f}  ratio {pf / bare:.3f}   "
                  f"(rounds: preflight {[round(x, 3) for x in both['preflight']]}, "
                  f"bare {[round(x, 3) for x in both['bare']]})")
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    """Spawn the ranks and print the fidelity ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size", default="16MiB")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = parser.parse_args()
    if args.backend == "nccl" and not torch.cuda.is_available():
        print("probe_fidelity.py --backend nccl needs a GPU: torch sees no CUDA device "
                         "(run --backend gloo here, or on the device machine)", file=sys.stderr)
        raise SystemExit(2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_worker, args=(args.ranks, port, args), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
