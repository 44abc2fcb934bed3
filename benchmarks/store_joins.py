"""Store joins at scale: N clients joining one TCPStore at once through preflight's bounded join.

    .venv/bin/python benchmarks/store_joins.py --clients 512 --clients 2048 --clients 4096

Rank 0 (this process) hosts the store as `Exchange.open` does (the run's owner mark included);
N threads each run `store_join.join_store` (listener wait, handshake under its own deadline,
owner-mark check), all released at once. Printed per N: wall time until the last join, the
median / 99th percentile / slowest join, and how many joins failed (a false PORT004 when a
handshake overran its deadline). Each N runs in a fresh process.

On a machine whose resolver cannot answer reverse lookups (this sandbox: the configured
nameserver does not answer), every c10d connection pays a DNS timeout on both sides; run the
benchmark in a network namespace with IPv6 off, where loopback peers resolve from /etc/hosts,
as on a cluster with working DNS (docs/performance.md says which was used):

    unshare -n sh -c 'ip link set lo up; sysctl -qw net.ipv6.conf.all.disable_ipv6=1; \\
        .venv/bin/python benchmarks/store_joins.py'
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import threading
import time


def measure(clients: int, timeout_s: float) -> dict[str, object]:
    from preflight.channel.exchange import Exchange
    from preflight.channel.store_join import join_store
    from preflight.model import World

    def world(rank: int, port: int) -> World:
        return World(launcher="env", rank=rank, world_size=clients + 1, host="bench", master_addr="127.0.0.1",
                     master_port=port, run_id="join-bench", job_id="join-bench")

    lead = Exchange(world(0, 0), timeout_s=timeout_s)
    lead.open()
    assert lead.store is not None, lead.store_error
    port = lead.world.master_port
    go = threading.Event()
    took: list[float] = []
    failed: list[str] = []
    keep = []

    def join(rank: int) -> None:
        go.wait()
        started = time.perf_counter()
        try:
            keep.append(join_store(world(rank, port), timeout_s))
            took.append(time.perf_counter() - started)
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {str(exc)[:120]}")

    threads = [threading.Thread(target=join, args=(r,), daemon=True) for r in range(1, clients + 1)]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    took.sort()
    return {"clients": clients, "wall_s": round(wall, 2),
            "median_s": round(statistics.median(took), 4) if took else None,
            "p99_s": round(took[int(0.99 * (len(took) - 1))], 4) if took else None,
            "max_s": round(took[-1], 3) if took else None,
            "failed": len(failed), "first_failure": failed[0] if failed else "",
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, action="append")
    parser.add_argument("--timeout", type=float, default=120.0, help="each join's deadline (the run's --timeout)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.clients[0], args.timeout)), flush=True)
        return
    for clients in args.clients or [512, 1024, 2048, 4096]:
        done = subprocess.run([sys.executable, __file__, "--one", "--clients", str(clients),
                               "--timeout", str(args.timeout)], capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        print(lines[-1] if lines else json.dumps({"clients": clients, "error": done.stderr[-300:]}), flush=True)


if __name__ == "__main__":
    main()
