"""Localization for real: fake hosts in network namespaces, some shaped with tbf, what the probes name and what it cost.

    sudo .venv/bin/python benchmarks/localization_netns.py                          # 2 shaped of 4, 1 rank/host
    sudo .venv/bin/python benchmarks/localization_netns.py --per-host 2 --mesh dp2,tp4 --runs 2
    sudo .venv/bin/python benchmarks/localization_netns.py --shaped 4 --runs 3      # one shaped host

Four hosts (tests/helpers/netns.py: real network namespaces on a bridge, ranks talking over
ib0), the --shaped ones (1-based) limited to 400 Mbit/s with tbf (about a tenth of the
unshaped veth here). Each run is a real env:// preflight of --per-host ranks per host with
gloo; each line: the localization method, its rounds, tests and seconds (BW013's data, rank
0's clock), the hosts named (BW005, BW006, BW012), the reachability phase's seconds (every host
probing every other over ib0) and the whole probe phase's seconds.
`--shaped "" --per-host 2` is tests/checks/test_network_netns.py's layout (4 hosts x 2 ranks, none shaped).
Needs root; on a shared machine the seconds vary with the load, the rounds do not.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.netns import build_fake_hosts
from tests.helpers.ranks import spawn_env_ranks, spread


def main(argv: list[str] | None = None) -> int:
    """Run --runs real preflights over four namespace hosts and print what localization did."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shaped", default="3,4", help="1-based hosts to shape")
    parser.add_argument("--per-host", type=int, default=1)
    parser.add_argument("--mesh", default="dp2,tp2")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    hosts = build_fake_hosts(4, f"pfb{os.getpid() % 100000}")  # two runs at once never share a name
    folder = Path(tempfile.mkdtemp(prefix="pf-localize-"))
    try:
        for index in (int(x) for x in args.shaped.split(",") if x):
            hosts[index - 1].shape("ib0", rate="400mbit", burst="256kb", latency="100ms")
        print(f"hosts {[h.hostname for h in hosts]}, shaped {args.shaped}, {args.per_host} rank(s) each, "
              f"mesh {args.mesh}")
        for run in range(args.runs):
            out = folder / f"run-{run}.json"
            ranks = spawn_env_ranks(4 * args.per_host, ["--mesh", args.mesh, "--ops", "all_reduce", "--sizes",
                                                        "1MiB", "--warmup", "1", "--iters", "5", "--probe-timeout",
                                                        "60", "--skip", "gpu,nic", "--json", str(out)],
                                    place=spread(hosts, args.per_host), master_addr=hosts[0].address,
                                    common_env={"GLOO_SOCKET_IFNAME": "ib0"}, timeout=300)
            if not out.exists():  # e.g. a --mesh that is not the world's shape: rank 0 says why
                why = (ranks[0].stdout + ranks[0].stderr).strip().splitlines()
                print(f"run {run}: rank 0 wrote no report (exit {ranks[0].returncode}): "
                      f"{why[-1] if why else 'no output'}", file=sys.stderr)
                return 2
            report = json.loads(out.read_text())
            summary = next((f["data"] for f in report["findings"] if f["check_id"] == "BW013"), None)
            named = sorted({h for f in report["findings"] if f["check_id"] in ("BW005", "BW006", "BW012")
                            for h in f["hosts"]})
            probes_s = report["meta"]["phases"].get("probes", 0.0)
            reach = f"reachability {report['meta']['phases'].get('reachability', 0.0):.2f} s"
            if summary is None:
                print(f"run {run}: no localization (no confirmed slow group); {reach}; probes {probes_s:.2f} s")
                continue
            parts = ", ".join(f"{k.replace('_', ' ')} {summary[k]}" for k in
                              ("round_robin_rounds", "grouptest_rounds", "grouptest_seconds") if k in summary)
            print(f"run {run}: {summary['method']}: {summary['rounds']} rounds ({parts}), {summary['tests']} tests, "
                  f"{summary['seconds']:.2f} s; named {', '.join(named) or 'nobody'}; {reach}; probes {probes_s:.2f} s")
    finally:
        hosts.close()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
