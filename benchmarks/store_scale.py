"""The store at scale: a real TCPStore, N rank payloads from a few client processes, rank 0's collect.

    .venv/bin/python benchmarks/store_scale.py --ranks 131072 --clients 4
    .venv/bin/python benchmarks/store_scale.py --ranks 32768 --compare-src /tmp/before --repeat 3

Three kinds of process, as on a job, with the store in a process of its own so that its memory
is measured alone (on a job it lives in rank 0's process, or torchrun's agent's):

  store     a bare c10d TCPStore server (`TCPStore(..., is_master=True)`), nothing else; its
            resident memory (VmRSS, sampled every 50 ms) and its peak (VmHWM) are the figures
  clients   `--clients` processes, each playing N/clients ranks: it first builds its ranks'
            payloads (benchmarks/rank0_scale.py's synthetic Slurm world: ~150 variables, 10
            interfaces, 8 IB ports, 8 GPUs per host, the local checks' findings; not timed), then,
            once every client is ready, publishes each with the project's own `Exchange.publish`
            over one connection
  rank 0    the project's own `Exchange.collect`, polling the store as the payloads arrive, over
            its own connection

The exchange's wall time runs from the start signal to the end of rank 0's collect. What is left
out: the ranks' joins and claims and their liveness beats (benchmarks/store_joins.py measures
joins), and the 131,072 connections of a real job (a few connections carry every payload here).
`--compare-src DIR` runs the same benchmark (this file) with the package of another source tree
(PYTHONPATH), alternated, and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RUN_ID = "store-scale"


def _status(pid: int, field: str) -> int:
    """A process's VmRSS / VmHWM in MiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return 0


def serve(port_file: str) -> None:
    """The store alone: host it, say its port, and live until stdin closes."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=600), wait_for_workers=False)
    Path(port_file).write_text(str(store.port))
    sys.stdin.read()


def _world(rank: int, size: int, port: int):
    from preflight.model import World

    return World(launcher="env", rank=rank, world_size=size, host=f"gpu{rank // 8 + 1:05d}",
                 master_addr="127.0.0.1", master_port=port, run_id=RUN_ID, job_id=RUN_ID)


def _exchange(rank: int, size: int, port: int, store):
    """An Exchange for `rank` over an open connection (its join and claim are not what is measured)."""
    from torch.distributed import PrefixStore

    from preflight.channel.exchange import Exchange

    exchange = Exchange(_world(rank, size, port), timeout_s=600.0)
    exchange.store = PrefixStore(exchange.prefix, store)
    return exchange


def client(index: int, clients: int, size: int, port: int, folder: str) -> None:
    """Build this client's ranks' payloads, say so, wait for the start, publish them all."""
    from rank0_scale import synthetic_payloads
    from torch.distributed import TCPStore

    ranks = list(range(1, size))[index::clients]
    payloads = list(synthetic_payloads("slurm", size, 0, ranks, light=True))
    store = TCPStore("127.0.0.1", port, None, False, timedelta(seconds=600))
    exchanges = [(_exchange(rank, size, port, store), payload) for rank, payload in payloads]
    Path(folder, f"ready.{index}").write_text("")
    while not Path(folder, "go").exists():
        time.sleep(0.01)
    started = time.time()
    for exchange, payload in exchanges:
        exchange.publish(payload)
    Path(folder, f"done.{index}").write_text(json.dumps({"started": started, "ended": time.time()}))


def collect(size: int, port: int, folder: str) -> None:
    """Rank 0: wait for the start, collect every payload, say how long it took."""
    from torch.distributed import TCPStore

    exchange = _exchange(0, size, port, TCPStore("127.0.0.1", port, None, False, timedelta(seconds=600)))
    Path(folder, "ready.rank0").write_text("")
    while not Path(folder, "go").exists():
        time.sleep(0.01)
    started = time.time()
    collected = exchange.collect(timeout_s=600.0)
    Path(folder, "collected").write_text(json.dumps({
        "started": started, "ended": time.time(), "payloads": len(collected.payloads),
        "bad": len(collected.bad_payloads), "rank0_peak_rss_mib": _status(os.getpid(), "VmHWM")}))


def measure(size: int, clients: int) -> dict[str, object]:
    """One exchange of `size` ranks: the store's memory over it and rank 0's collect time."""
    folder = tempfile.mkdtemp(prefix="pf-store-scale-")
    me = [sys.executable, __file__]
    port_file = Path(folder, "port")
    server = subprocess.Popen([*me, "--serve", str(port_file)], stdin=subprocess.PIPE)
    while not port_file.exists() or not port_file.read_text():
        time.sleep(0.05)
    port = port_file.read_text()
    idle_rss = _status(server.pid, "VmRSS")
    workers = [subprocess.Popen([*me, "--client", str(i), "--clients", str(clients), "--ranks", str(size),
                                 "--port", port, "--folder", folder]) for i in range(clients)]
    workers.append(subprocess.Popen([*me, "--collect", "--ranks", str(size), "--port", port, "--folder", folder]))
    while len(list(Path(folder).glob("ready.*"))) < clients + 1:
        if any(w.poll() not in (None, 0) for w in workers):
            raise SystemExit("store_scale: a client failed before the start")
        time.sleep(0.1)
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            samples.append(_status(server.pid, "VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    load = os.getloadavg()[0]
    Path(folder, "go").write_text("")
    for worker in workers:
        worker.wait()
    stop.set()
    sampler.join()
    peak = _status(server.pid, "VmHWM")
    after = _status(server.pid, "VmRSS")
    server.stdin.close()  # type: ignore[union-attr]
    server.wait()
    rank0 = json.loads(Path(folder, "collected").read_text())
    done = [json.loads(p.read_text()) for p in Path(folder).glob("done.*")]
    for path in Path(folder).iterdir():
        path.unlink()
    os.rmdir(folder)
    first = min(d["started"] for d in done)
    return {"ranks": size, "clients": clients, "collected": rank0["payloads"], "bad": rank0["bad"],
            "exchange_s": round(rank0["ended"] - first, 2),
            "publish_s": round(max(d["ended"] for d in done) - first, 2),
            "store_idle_rss_mib": idle_rss, "store_peak_rss_mib": peak, "store_rss_after_mib": after,
            "store_peak_growth_mib": peak - idle_rss, "store_rss_samples_max_mib": max(samples, default=0),
            "rank0_peak_rss_mib": rank0["rank0_peak_rss_mib"], "load_1min_at_start": round(load, 2)}


def compare(src: str, size: int, clients: int, repeat: int) -> None:
    """This tree against the package at `src`, alternated; medians and the pairs' median ratios."""
    trees = {"this tree": str(Path(__file__).resolve().parents[1]), src: os.path.abspath(src)}
    rows: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(repeat):
        for name, root in trees.items():
            done = subprocess.run([sys.executable, __file__, "--ranks", str(size), "--clients", str(clients)],
                                  check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root})
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows[name].append(row)
            print(json.dumps({"tree": name, **row}), flush=True)
    figures = ("exchange_s", "store_peak_rss_mib", "store_peak_growth_mib", "rank0_peak_rss_mib")
    print(f"\n| {size} ranks, {clients} clients, median of {repeat} | " + " | ".join(figures) + " | load |")
    print("|---|" + "---|" * (len(figures) + 1))
    for name in trees:
        loads = [row["load_1min_at_start"] for row in rows[name]]
        print(f"| {name} | " + " | ".join(str(statistics.median(r[f] for r in rows[name])) for f in figures)
              + f" | {min(loads)}-{max(loads)} |")
    ratios = [statistics.median(a[f] / max(b[f], 1e-9) for a, b in zip(rows["this tree"], rows[src], strict=True))
              for f in figures]
    print("| this / that, median of the pairs | " + " | ".join(f"{r:.2f}" for r in ratios) + " | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=16384)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--compare-src", metavar="DIR", help="also run with the package of this source tree")
    parser.add_argument("--repeat", type=int, default=3, help="with --compare-src: runs of each tree")
    parser.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--collect", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
    elif args.client is not None:
        client(args.client, args.clients, args.ranks, args.port, args.folder)
    elif args.collect:
        collect(args.ranks, args.port, args.folder)
    elif args.compare_src:
        compare(args.compare_src, args.ranks, args.clients, args.repeat)
    else:
        print(json.dumps(measure(args.ranks, args.clients)))


if __name__ == "__main__":
    main()
