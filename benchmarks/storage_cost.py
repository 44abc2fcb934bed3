"""What the storage family costs and measures: `preflight launch -n N --storage DIR` with and without it.

Alternating pairs in one invocation (machine noise hits both alike). Prints, per mode, the median
wall time and, with the family, the median of its phase (`meta.phases.storage`), the aggregate
write and read GB/s and each pass's share; checks that nothing is left under DIR. Not a test.

    python benchmarks/storage_cost.py [--nproc 4] [--pairs 5] [--dir /path/on/the/disk] [-- extra flags]
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(nproc: int, extra: list[str], out: Path) -> tuple[float, dict]:
    """(wall seconds, the JSON report) of one launch."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "preflight", "launch", "-n", str(nproc), "--quiet", "--json", str(out),
                    "--skip", "probe", *extra], capture_output=True, check=False)
    return time.perf_counter() - began, json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--dir", default="", help="the checkpoint directory (default: a new one under /var/tmp)")
    parser.add_argument("extra", nargs="*", help="more flags for the runs with the family, e.g. --checkpoint-size 8G")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="storage-cost-"))
    path = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ckpt-", dir="/var/tmp"))
    atexit.register(shutil.rmtree, folder, True)  # the runs' reports, and a checkpoint folder of our own
    if not args.dir:
        atexit.register(shutil.rmtree, path, True)
    with_family, without = [], []
    for _ in range(args.pairs):
        with_family.append(one(args.nproc, ["--storage", str(path), *args.extra], folder / "with.json"))
        without.append(one(args.nproc, [], folder / "without.json"))
        assert not list(path.iterdir()), f"left under {path}: {list(path.iterdir())}"
    phase = [r["meta"]["phases"].get("storage", 0.0) for _, r in with_family]
    writes = [r["storage"]["write_gbps"] for _, r in with_family if r["storage"]["write_gbps"]]
    reads = [r["storage"]["read_gbps"] for _, r in with_family if r["storage"]["read_gbps"]]
    findings = sorted({f["check_id"] for _, r in with_family for f in r["findings"] if f["check_id"][:3] == "STO"})
    section = with_family[-1][1]["storage"]
    print(f"path {path}: {section['hosts'][0]['mount']['fs_type']} {section['hosts'][0]['mount']['source']}, "
          f"{section['share_bytes'] / 2**20:g} MiB per rank, {args.nproc} ranks")
    print(f"with --storage: wall median {statistics.median(w for w, _ in with_family):.2f} s, storage phase median "
          f"{statistics.median(phase):.3f} s (min {min(phase):.3f}, max {max(phase):.3f}); aggregate write median "
          f"{statistics.median(writes):.3g} GB/s, read median {statistics.median(reads):.3g} GB/s; "
          f"storage findings: {findings or 'none'}")
    print(f"without: wall median {statistics.median(w for w, _ in without):.2f} s")


if __name__ == "__main__":
    main()
