"""The exchange at 1,024 and 4,096 clients: one TCPStore hosted as rank 0 hosts it, real payloads.

    .venv/bin/python benchmarks/store_exchange.py                  # 1024 and 4096
    .venv/bin/python benchmarks/store_exchange.py --ranks 4096 --procs 8
    .venv/bin/python benchmarks/store_exchange.py --ranks 4096 --collect-only   # rank 0's collect alone

Rank 0 (this process) opens the store through `Exchange.open` (the hosting path: TCPStore with
wait_for_workers=False, the run's mark). `--procs` client processes, each with one thread per
rank it plays, join it through `Exchange.open` (the bounded join: listener wait, handshake,
mark check) and `Exchange.publish` a realistic payload (benchmarks/rank0_scale.py's synthetic
facts: ~150 variables, 10 interfaces, 8 IB ports, 8 GPUs, the local checks' findings). Once
every client has published (the store's own `reported` counter), rank 0 runs `Exchange.collect`
and the figure is its duration: the arrival list, chunked multi_gets of 1,024 keys, decode and
validation of every payload. Also reported: the publish window (first join to last publish)
and the largest single value written. Each client stops its liveness beat (channel/roster.py)
once it has published: on a real job it beats from its own host; the store's side of those
beats (one add per rank per second) is not in the collect figure.
"""

from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rank0_scale import _payloads, _sections, read_payloads

RUN_ID = "store-bench"


def _world(rank: int, size: int, port: int):
    from preflight.model import World

    return World(launcher="env", rank=rank, world_size=size, host=f"gpu{rank // 8 + 1:05d}",
                 master_addr="127.0.0.1", master_port=port, run_id=RUN_ID, job_id=RUN_ID)


def _client_process(ranks: list[int], size: int, port: int, data: str, out: multiprocessing.Queue) -> None:
    """Play `ranks` as threads: join, publish, report the publish time and the largest value."""
    from preflight.channel.exchange import Exchange

    payloads = read_payloads(data, set(ranks))
    done: list[float] = []
    errors: list[str] = []

    def play(rank: int) -> None:
        exchange = Exchange(_world(rank, size, port), timeout_s=120.0)
        exchange.open()
        if exchange.store is None:
            errors.append(f"rank {rank}: {exchange.store_error}")
            return
        exchange.publish(payloads[rank])
        done.append(time.time())
        # A real rank beats from its own host until it leaves; here 4,095 beating threads would
        # share rank 0's two cores during the collect being measured.
        exchange.leave()

    threads = [threading.Thread(target=play, args=(rank,)) for rank in ranks if rank in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put({"last_publish": max(done, default=0.0), "errors": errors})


def measure(size: int, procs: int) -> dict[str, object]:
    from preflight.channel.exchange import Exchange

    folder = Path(tempfile.mkdtemp(prefix="pf-store-"))
    atexit.register(shutil.rmtree, folder, True)  # the generated payloads: gone with this process
    data = str(folder / "payloads.bin")
    subprocess.run([sys.executable, str(Path(__file__).parent / "rank0_scale.py"), "--generate", data,
                    "--ranks", str(size), "--world", "torchrun", "--missing-hosts", "0"], check=True)
    largest = max(len(raw) for raw in _payloads(data))
    lead = Exchange(_world(0, size, 0), timeout_s=120.0)
    lead.open()
    assert lead.store is not None, lead.store_error
    port = lead.world.master_port
    from preflight.channel import keys

    lead.publish(read_payloads(data, {0})[0])  # rank 0 publishes too
    context = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = context.Queue()
    peers = list(range(1, size))
    started = time.time()
    workers = [context.Process(target=_client_process, args=(peers[i::procs], size, port, data, queue))
               for i in range(procs)]
    for worker in workers:
        worker.start()
    deadline = time.time() + 240
    def reported() -> int:  # the ranks whose payload is in (their arrivals)
        return len(keys.listed_ranks(lead.store, keys.ARRIVALS.key, size))

    while reported() < size and time.time() < deadline:  # every rank has published
        time.sleep(0.05)
    reported_now = reported()
    published = time.time()
    collect_started = time.perf_counter()
    collected = lead.collect(timeout_s=0.0 if reported_now < size else 60.0)
    collect_s = time.perf_counter() - collect_started
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    errors = [e for r in results for e in r["errors"]]
    return {"ranks": size, "client_processes": procs,
            "collect_s": round(collect_s, 3),
            "publish_window_s": round(published - started, 1), "collected": len(collected.payloads),
            "reported": reported_now,
            "bad": len(collected.bad_payloads), "largest_value_kb": round(largest / 1e3, 1),
            "errors": errors[:3], "error_count": len(errors)}


def measure_collect_only(size: int, repeats: int = 3) -> dict[str, object]:
    """Rank 0's collect alone: one client of this process writes every payload (and the arrival
    list) first, so no client process shares the cores during the collect; `repeats` collects
    of the same store, each decoding everything again (the first is the figure to quote)."""
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    from preflight.channel.exchange import Exchange

    folder = Path(tempfile.mkdtemp(prefix="pf-store-"))
    atexit.register(shutil.rmtree, folder, True)  # the generated payloads: gone with this process
    data = str(folder / "payloads.bin")
    subprocess.run([sys.executable, str(Path(__file__).parent / "rank0_scale.py"), "--generate", data,
                    "--ranks", str(size), "--world", "torchrun", "--missing-hosts", "0"], check=True)
    lead = Exchange(_world(0, size, 0), timeout_s=120.0)
    lead.open()
    assert lead.store is not None, lead.store_error
    writer = PrefixStore(lead.prefix, TCPStore("127.0.0.1", lead.world.master_port, None, False,
                                               timedelta(seconds=60)))
    for digest, section in _sections(data):  # as the ranks publish them: the sections before the payloads
        writer.set(f"shared/{digest}", section)
    for raw in _payloads(data):
        rank = int(raw[8:raw.index(b",")])  # the payload's first field: {"rank":N,
        writer.set(f"rank/{rank}", raw)
        writer.append("arrivals", f"{rank},")
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        collected = lead.collect(timeout_s=60.0)
        seconds.append(round(time.perf_counter() - started, 3))
    return {"ranks": size, "collect_only_s": seconds, "collected": len(collected.payloads),
            "bad": len(collected.bad_payloads)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, action="append")
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--collect-only", action="store_true",
                        help="time rank 0's collect alone, the payloads written by one client first")
    args = parser.parse_args()
    if args.collect_only:
        for size in args.ranks or [1024, 4096]:
            print(json.dumps(measure_collect_only(size)), flush=True)
        return
    for size in args.ranks or [1024, 4096]:
        if len(args.ranks or []) <= 1 and args.ranks:
            print(json.dumps(measure(size, args.procs)), flush=True)
            continue
        # each N in a fresh process
        done = subprocess.run([sys.executable, __file__, "--ranks", str(size), "--procs", str(args.procs)],
                              check=True, capture_output=True, text=True, env={**os.environ})
        print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
