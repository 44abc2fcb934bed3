"""Made-up but self-consistent ProbeResults and JobReports, for renderer tests and benchmarks.

A FAKE by design, and documented as such wherever it is used: the probes (issue 5) measure
real collectives; these only give the renderers realistic shapes (DeviceMesh groups,
nccl-tests bus bandwidth factors, a slow host) without running them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from preflight.model import (
    CheckOutcome,
    Finding,
    GpuFacts,
    JobReport,
    ProbeDevice,
    ProbeResult,
    RankFacts,
    ReportMeta,
    Severity,
    Versions,
    World,
)

BUS_FACTOR = {  # nccl-tests' busbw = algbw * factor(n)
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def parse_mesh(mesh: str) -> list[tuple[str, int]]:
    """'dp2,tp2' -> [('dp', 2), ('tp', 2)] (outermost first)."""
    out = []
    for part in mesh.split(","):
        name = part.rstrip("0123456789")
        out.append((name, int(part[len(name):])))
    return out


def mesh_groups(mesh: Sequence[tuple[str, int]]) -> dict[str, list[list[int]]]:
    """Rank groups per dimension of a row-major DeviceMesh (as `init_device_mesh` lays it out)."""
    shape = [size for _, size in mesh]
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    groups: dict[str, list[list[int]]] = {}
    for axis, (name, size) in enumerate(mesh):
        others = [range(s) for i, s in enumerate(shape) if i != axis]
        rows = []
        for coords in itertools.product(*others):
            full = list(coords)
            full.insert(axis, 0)
            base = sum(c * st for c, st in zip(full, strides))
            rows.append([base + k * strides[axis] for k in range(size)])
        groups[name] = rows
    return groups


def probe_results(mesh: str, rank_hosts: Mapping[int, str], *, ops: Sequence[str] = ("all_reduce", "all_gather"),
                  sizes: Sequence[int] = (1 << 16, 1 << 20, 1 << 24, 1 << 26),
                  link_gbps: Mapping[str, float] | None = None, slow_hosts: Mapping[str, float] | None = None,
                  unverified_groups: Sequence[tuple[str, int]] = ()) -> list[ProbeResult]:
    """One result per dimension, op, size and group; a group with a slow host runs at that host's factor."""
    link_gbps = link_gbps or {}
    slow_hosts = slow_hosts or {}
    results = []
    for dim, groups in mesh_groups(parse_mesh(mesh)).items():
        peak = link_gbps.get(dim, 10.0)
        for op, size, (index, ranks) in itertools.product(ops, sizes, enumerate(groups)):
            hosts = sorted({rank_hosts[r] for r in ranks})
            factor = min([slow_hosts.get(h, 1.0) for h in hosts])
            n = len(ranks)
            op_factor = 1.0 - 0.08 * ops.index(op)  # ops differ a little, as they do on real links
            busbw = peak * factor * op_factor * size / (size + 256 * 1024)  # latency-bound small messages
            algbw = busbw / BUS_FACTOR[op](n) if n > 1 else busbw
            time_s = size / (algbw * 1e9)
            results.append(ProbeResult(
                dim=dim, op=op, size_bytes=size, group_index=index, ranks=list(ranks), hosts=hosts,
                time_s=time_s, algbw_gbps=algbw, busbw_gbps=busbw,
                rank_times_s={r: time_s * (0.97 + 0.01 * (r % 4)) for r in ranks},
                verified=(dim, index) not in unverified_groups,
            ))
    return results


def big_report(world_size: int = 1024, ranks_per_host: int = 8, mesh: str = "dp8,pp8,tp16",
               env_size: int = 70) -> JobReport:
    """A failed 1024-rank run: drifting env on one host, errors on two hosts, probes on every dimension."""
    hosts = {r: f"gpu{r // ranks_per_host + 1:04d}" for r in range(world_size)}
    base_env = {f"VAR_{i:03d}": f"value-{i}" * 3 for i in range(env_size)}
    ranks = []
    for rank in range(world_size):
        env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(rank % ranks_per_host))
        if hosts[rank] == "gpu0007":
            env["NCCL_IB_HCA"] = "mlx5_1"
            env["VAR_001"] = "<script>alert(1)</script>"
        world = World(launcher="slurm", rank=rank, world_size=world_size, host=hosts[rank], job_id="123456")
        ranks.append(RankFacts(rank=rank, host=hosts[rank], world=world, env=env,
                               versions=Versions(torch="2.13.0", nccl="2.27.3")))
    check_ids = [f"ENV{i:03d}" for i in range(1, 13)] + [f"NET{i:03d}" for i in range(1, 9)] + \
        [f"GPU{i:03d}" for i in range(1, 9)] + ["BW001", "BW002", "BW003", "RANK001", "RANK002"]
    checks = [CheckOutcome(c, c.rstrip("0123456789").lower(), "cross", f"{c} title", Severity.OK, 0.001)
              for c in check_ids]
    slow = [r for r in range(world_size) if hosts[r] == "gpu0042"]
    findings = [
        Finding("ENV003", Severity.ERROR, "NCCL_IB_HCA differs: mlx5_1 on 8 rank(s), mlx5_0 elsewhere",
                "Set NCCL_IB_HCA identically on every node.", list(range(48, 56)), ["gpu0007"]),
        Finding("BW002", Severity.ERROR, "tp group 42 at 2.1 GB/s, 0.21 x its siblings' median",
                "Drain gpu0042 and check its NVLink / PCIe state.", slow, ["gpu0042"], {"dim": "tp"}),
        Finding("NET004", Severity.WARN, "ib0 at 100 Gb/s on 4 hosts, 200 Gb/s elsewhere",
                "Check the cabling and port speed.", [], [f"gpu{i:04d}" for i in (3, 9, 77, 101)]),
    ]
    probes = probe_results(mesh, hosts, ops=("all_reduce", "all_gather", "reduce_scatter"),
                           sizes=tuple(1 << s for s in range(16, 29, 2)),
                           link_gbps={"tp": 180.0, "pp": 40.0, "dp": 45.0}, slow_hosts={"gpu0042": 0.2})
    meta = ReportMeta(launcher="slurm", job_id="123456", run_id="slurm-123456", world_size=world_size,
                      num_nodes=world_size // ranks_per_host, master_addr="gpu0001", master_port=29500,
                      mesh=mesh, backend="nccl", command_line=f"preflight --mesh {mesh} --html report.html",
                      duration_s=41.5, versions={"torch": "2.13.0", "nccl": "2.27.3"},
                      phases={"facts": 1.2, "exchange": 3.1, "probes": 35.0})
    return JobReport(meta=meta, ranks=ranks, findings=findings, checks=checks, probes=probes,
                     bad_hosts=["gpu0007", "gpu0042"], verdict="failed", exit_code=3,
                     why="2 error(s), 1 warning(s); first: ENV003 NCCL_IB_HCA differs")


def history_report(run_id: str, hosts: Sequence[str], *, ranks_per_host: int = 1, mesh: str = "",
                   bad_hosts: Sequence[str] = (), slow_hosts: Mapping[str, float] | None = None,
                   started_at: str = "2026-01-01T00:00:00+00:00", link_gbps: float = 40.0,
                   gpus: bool = False) -> JobReport:
    """A small finished run over `hosts` (a FAKE run, for history writers and benchmarks): a world
    (or `mesh`) of all_reduce figures at two sizes, `bad_hosts` failed with a GPU003 error each;
    `gpus`: every rank bound a GPU (UUID GPU-<host>-<rank>), as on NCCL."""
    rank_hosts = {r: hosts[r // ranks_per_host] for r in range(len(hosts) * ranks_per_host)}
    world_size = len(rank_hosts)
    mesh = mesh or f"world{world_size}"
    ranks = [RankFacts(rank=r, host=h, world=World(launcher="slurm", rank=r, world_size=world_size, host=h,
                                                   job_id=run_id),
                       gpus=[GpuFacts(index=0, name="NVIDIA H100", uuid=f"GPU-{h}-{r}")] if gpus else [])
             for r, h in rank_hosts.items()]
    probes = probe_results(mesh, rank_hosts, ops=("all_reduce",), sizes=(1 << 20, 1 << 26),
                           link_gbps={name: link_gbps for name, _ in parse_mesh(mesh)}, slow_hosts=slow_hosts)
    findings = [Finding("GPU003", Severity.ERROR, f"GPU 0 on {h} is lost", "Drain it.", [], [h]) for h in bad_hosts]
    meta = ReportMeta(launcher="slurm", job_id=run_id, run_id=run_id, world_size=world_size, num_nodes=len(hosts),
                      master_addr=hosts[0], master_port=29500, mesh=mesh, backend="gloo", started_at=started_at,
                      finished_at=started_at)
    failed = bool(bad_hosts)
    devices = [ProbeDevice(r, h, "nccl", index=0, uuid=f"GPU-{h}-{r}") for r, h in rank_hosts.items()] if gpus else []
    return JobReport(meta=meta, ranks=ranks, findings=findings, probes=probes, probe_devices=devices,
                     bad_hosts=sorted(bad_hosts), verdict="failed" if failed else "passed",
                     exit_code=3 if failed else 0)
