"""What does `preflight.check(mesh)` add to a training job's time to its first step?

A tiny trainer (gloo, a 2x2 DeviceMesh, one forward/backward and an all_reduce of the
gradients over dp, then the world) run under torchrun with and without `preflight.check(mesh)`
between the mesh and the first step, alternating, several repetitions in one invocation, so
machine noise hits both alike. Each run's rank 0 prints its time to first step, from the
worker's start (before `import torch`) to the end of the first step; we print min and median
of that and of the whole launch's wall time, with and without, and the ratios of medians.

    python benchmarks/api_overhead.py --nproc 4 --repeat 5 [--skip-probe]

As a torchrun worker (what the above starts): `api_overhead.py worker with|without [--skip-probe]`.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before torch's import: a job pays that too

import argparse  # noqa: E402
import os  # noqa: E402
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

        preflight.check(mesh, quiet=True, skip=["probe"] if skip_probe else [])
    model = torch.nn.Linear(64, 1)
    model(torch.ones(8, 64)).pow(2).mean().backward()
    grad = model.weight.grad
    assert grad is not None
    dist.all_reduce(grad, group=mesh.get_group("dp"))
    dist.all_reduce(grad)
    if dist.get_rank() == 0:
        print(f"first_step_s {time.perf_counter() - STARTED:.3f}", flush=True)
    dist.destroy_process_group()


def launch(nproc: int, with_check: bool, skip_probe: bool) -> tuple[float, float]:
    """(rank 0's time to first step, the whole launch's wall time) of one torchrun."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               __file__, "worker", "with" if with_check else "without", *(["--skip-probe"] if skip_probe else [])]
    started = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("first_step_s ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return float(lines[0].split()[1]), wall


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        worker(sys.argv[2] == "with", "--skip-probe" in sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4, help="ranks, even (a 2 x nproc/2 mesh)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-probe", action="store_true", help="preflight.check(mesh, skip=['probe'])")
    args = parser.parse_args()
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.repeat):
        for with_check in (False, True):
            runs[with_check].append(launch(args.nproc, with_check, args.skip_probe))
    print(f"nproc={args.nproc} repeat={args.repeat} skip_probe={args.skip_probe}")
    for index, figure in ((0, "time to first step"), (1, "launch wall")):
        medians = {}
        for with_check, label in ((False, "without"), (True, "with preflight.check")):
            values = [run[index] for run in runs[with_check]]
            medians[with_check] = statistics.median(values)
            print(f"{figure:20s} {label:22s} min {min(values):.2f}s median {medians[with_check]:.2f}s")
        print(f"{figure:20s} with - without {medians[True] - medians[False]:+.2f}s, "
              f"ratio of medians {medians[True] / medians[False]:.2f}")


if __name__ == "__main__":
    main()
