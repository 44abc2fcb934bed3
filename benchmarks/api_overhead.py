"""What does `preflight.check(mesh)` add to a training job's time to its first step?

A tiny trainer (gloo, a 2x2 DeviceMesh, one forward/backward and an all_reduce of the
gradients over dp, then the world) run under torchrun with and without `preflight.check(mesh)`
between the mesh and the first step, alternating, several repetitions in one invocation, so
machine noise hits both alike. Each run's rank 0 prints its time to first step, from the
worker's start (before `import torch`) to the end of the first step; we print min and median
of that and of the whole launch's wall time, with and without, and the ratios of medians; and
rank 0's CPU seconds to its first step (its process's, `import torch` included), and the sum of
every rank's: the figures a loaded machine moves least (on 2 cores, 4 ranks' CPU is at least half
its seconds of wall).

    python benchmarks/api_overhead.py --nproc 4 --repeat 5 [--skip-probe]
    python benchmarks/api_overhead.py --compare-src /tmp/old   # also preflight from another source tree
    python benchmarks/api_overhead.py --tiny                   # a smoke run: 2 ranks, 1 repetition
    python benchmarks/api_overhead.py --compiled               # bytecode compiled first, as a wheel's install does

--compare-src DIR adds a third launch per repetition whose ranks import preflight from DIR (a
`git archive <commit> preflight | tar -x -C DIR` of an earlier commit): before and after, in one
run, against the same baseline.

As a torchrun worker (what the above starts): `api_overhead.py worker with|without [--skip-probe]`.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before torch's import: a job pays that too

import argparse  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402


def worker(with_check: bool, skip_probe: bool) -> None:
    """One rank of the tiny trainer; rank 0 prints `first_step_s <seconds>`."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2, dist.get_world_size() // 2), mesh_dim_names=("dp", "tp"))
    if with_check:
        import preflight

        # The cost is what is measured, not the verdict: a loaded machine's straggler (BW003) must not end the run.
        preflight.check(mesh, quiet=True, skip=["probe"] if skip_probe else [], on_failure="return")
    model = torch.nn.Linear(64, 1)
    model(torch.ones(8, 64)).pow(2).mean().backward()
    grad = model.weight.grad
    assert grad is not None
    dist.all_reduce(grad, group=mesh.get_group("dp"))
    dist.all_reduce(grad)
    # One write per line (the ranks share torchrun's stdout: print's two writes could interleave).
    if dist.get_rank() == 0:
        # And rank 0's CPU seconds to that point: on a loaded machine the wall time also counts
        # waiting for a core, the CPU time much less.
        sys.stdout.write(f"first_step_s {time.perf_counter() - STARTED:.3f} cpu_s {time.process_time():.3f}\n")
        sys.stdout.flush()
    sys.stdout.write(f"rank_cpu_s {time.process_time():.3f}\n")  # every rank's, summed by the launch
    sys.stdout.flush()
    dist.destroy_process_group()


def launch(nproc: int, with_check: bool, skip_probe: bool, src: str = "") -> tuple[float, float, float, float]:
    """(rank 0's time to first step, the whole launch's wall time, rank 0's CPU seconds to its first
    step, every rank's CPU seconds to its first step summed) of one torchrun; src: preflight from there."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               __file__, "worker", "with" if with_check else "without", *(["--skip-probe"] if skip_probe else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if src:  # ahead of the installed (editable) preflight; the ranks' sys.path[0] is benchmarks/, not a checkout
        env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    first = re.findall(r"first_step_s (\d+\.\d+) cpu_s (\d+\.\d+)", done.stdout)
    ranks = [float(cpu) for cpu in re.findall(r"rank_cpu_s (\d+\.\d+)", done.stdout)]
    if done.returncode != 0 or not first or len(ranks) != nproc:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return float(first[0][0]), wall, float(first[0][1]), sum(ranks)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        worker(sys.argv[2] == "with", "--skip-probe" in sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4, help="ranks, even (a 2 x nproc/2 mesh)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-probe", action="store_true", help="preflight.check(mesh, skip=['probe'])")
    parser.add_argument("--compare-src", default="", help="also run preflight.check imported from this source tree")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: 2 ranks, 1 repetition")
    parser.add_argument("--compiled", action="store_true",
                        help="compile each tree's bytecode first, as installing a wheel does (see below)")
    args = parser.parse_args()
    if args.tiny:
        args.nproc, args.repeat = 2, 1
    if args.compiled:
        # An editable install under PYTHONDONTWRITEBYTECODE=1 (this lab's environment) compiles
        # preflight's ~150 modules from source on every import: ~0.5 s of CPU on the first step
        # that a wheel's install (pip compiles the .pyc files) never pays. The .pyc files are read
        # even where writing them is off.
        for tree in filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), args.compare_src]):
            subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "preflight")], check=True)
    load_before = os.getloadavg()[0]
    variants = [("without", False, ""), ("with preflight.check", True, "")]
    if args.compare_src:
        variants.append((f"with check from {args.compare_src}", True, os.path.abspath(args.compare_src)))
    runs: dict[str, list[tuple[float, float, float, float]]] = {label: [] for label, _, _ in variants}
    for _ in range(args.repeat):
        for label, with_check, src in variants:
            runs[label].append(launch(args.nproc, with_check, args.skip_probe, src))
    print(f"nproc={args.nproc} repeat={args.repeat} skip_probe={args.skip_probe} compiled={args.compiled} "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for index, figure in ((0, "time to first step"), (1, "launch wall"), (2, "rank 0 CPU to step"),
                          (3, "all ranks' CPU")):
        medians = {}
        for label, _, _ in variants:
            values = [run[index] for run in runs[label]]
            medians[label] = statistics.median(values)
            print(f"{figure:20s} {label:22s} min {min(values):.2f}s median {medians[label]:.2f}s "
                  f"max {max(values):.2f}s")
        base = medians["without"]
        for label, _, _ in variants[1:]:
            print(f"{figure:20s} {label} - without {medians[label] - base:+.2f}s, "
                  f"ratio of medians {medians[label] / base:.2f}")


if __name__ == "__main__":
    main()
