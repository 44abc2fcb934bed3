"""Rank 0's work after the exchange, at 1,024 / 4,096 / 16,384 synthetic ranks.

    .venv/bin/python benchmarks/rank0_scale.py                    # the sweep: every N, both worlds
    .venv/bin/python benchmarks/rank0_scale.py --ranks 16384 --world slurm   # one N, one world
    .venv/bin/python benchmarks/rank0_scale.py --ranks 131072 --world slurm --compare-src /tmp/before --repeat 3

Each (N, world) runs in a fresh process: a child generates N payloads (written to a temporary
file, so generating them costs the measured process neither time nor memory), then the
measured process drives the project's own code, stage by stage:

  decode        every payload through the exchange's own validation (channel/collected.accept_many, the
                model's msgspec codec), read in chunks of 1,024 as the store collect does,
                then Collected.merged_with and the gatherer-failure findings
  cross checks  registry.run_checks over every registered cross check, with one JobView
  report        steps.verdict.build_report
  json/text/junit/html/exclude/terminal   each renderer, to a temporary folder (terminal: rich, to memory)
  reload        `preflight report`'s path: the JSON read back and rendered again (text, html), in a child
                process as `preflight report` is (its own time and peak RSS; peak_rss_mib is the larger)

`--nccl` adds NCCL's account (issue 42): each rank's NcclAccount as it publishes it under `nccl/<rank>`
(IB through its GPU's NIC with GPUDirect RDMA, P2P/CUMEM and NVLS inside the host; one host fallen back
to Socket), decoded once per distinct value as rank 0's probe gather does (Board.fetch_interned), a
shared by the ranks that sent it, folded per host and dimension, judged
(NCCL020-NCCL024) and rendered: stage `nccl`, and every later stage with the report's NCCL section.
Compare `total_s` / `total_cpu_s` with and without it.

`--gpu-node` gives each rank the health and placement sections of a rank on an 8-GPU node (its bound
GPU's NVML reads, its CPUs and PCIe place, its host's clock offset and build fingerprint on local rank 0:
gpu_node_facts.py), each rank's own, where the default ranks send the empty ones of a CPU rank: what
rank 0 holds, writes and reloads at that scale on GPU hosts. This tree only (not with --compare-src).

The payloads are written as rank 0 reads them from the store: each rank's payload and, before
the first payload that names it, each distinct shared section once (channel/sections.py, issue
44); `payload_kb_per_rank` is all of that per reporting rank, the bytes that reach rank 0.
`--compare-src DIR` runs DIR's own copy of this benchmark (its own wire form), alternated, after `--warmup`
pairs (default 1) run and printed but not counted.

The worlds are SYNTHETIC but built the way a real run builds them: the World comes from
steps.launchers.resolve_world over torchrun-like or Slurm-like variables, 8 ranks per host,
~150 environment variables per rank, 10 interfaces, 8 IB ports and 8 GPUs per host, the
local checks' real findings and outcomes. Planted faults: one host missing (8 ranks),
NCCL_SOCKET_IFNAME different on one host, another torch on one rank, one IB port down on one
host, a low RLIMIT_MEMLOCK on one host. `--missing-hosts K` plants K missing hosts instead.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

PER_HOST = 8
SIZES = (1024, 4096, 16384)


# -- generation (child process) ------------------------------------------------------------

def _common_env() -> dict[str, str]:
    env = {
        "PATH": "/opt/conda/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/opt/amazon/efa/lib",
        "NCCL_SOCKET_IFNAME": "ib", "NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "WARN", "NCCL_IB_GID_INDEX": "3",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "8", "PYTHONUNBUFFERED": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "HOME": "/home/alice", "USER": "alice", "SHELL": "/bin/bash",
        "LANG": "C.UTF-8", "WANDB_API_KEY": "<redacted>:3f2a9c0d1e4b", "HF_HOME": "/fsx/cache/hf",
    }
    for i in range(110):
        env[f"APP_SETTING_{i:03d}"] = f"value-{i}-" + "x" * (i % 40)
    return env


def _launcher_env(world: str, rank: int, size: int, host: str, port: int) -> dict[str, str]:
    hosts = size // PER_HOST
    node, local = divmod(rank, PER_HOST)
    if world == "torchrun":
        return {
            "RANK": str(rank), "LOCAL_RANK": str(local), "GROUP_RANK": str(node), "ROLE_RANK": str(rank),
            "WORLD_SIZE": str(size), "LOCAL_WORLD_SIZE": str(PER_HOST), "GROUP_WORLD_SIZE": str(hosts),
            "ROLE_WORLD_SIZE": str(size), "ROLE_NAME": "default",
            "MASTER_ADDR": "gpu00001", "MASTER_PORT": str(port),
            "TORCHELASTIC_RUN_ID": "bench", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_ERROR_FILE": f"/tmp/torchelastic_x/{local}/error.json",
            "HOSTNAME": host, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
        }
    return {
        "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
        "SLURM_NTASKS": str(size), "SLURM_NPROCS": str(size), "SLURM_NNODES": str(hosts),
        "SLURM_JOB_NUM_NODES": str(hosts), "SLURM_STEP_NUM_NODES": str(hosts),
        "SLURM_JOB_NODELIST": f"gpu[00001-{hosts:05d}]", "SLURM_STEP_NODELIST": f"gpu[00001-{hosts:05d}]",
        "SLURM_TASKS_PER_NODE": f"{PER_HOST}(x{hosts})", "SLURM_STEP_TASKS_PER_NODE": f"{PER_HOST}(x{hosts})",
        "SLURM_NTASKS_PER_NODE": str(PER_HOST), "SLURM_JOB_ID": "424242", "SLURM_STEP_ID": "0",
        "SLURM_JOBID": "424242", "SLURMD_NODENAME": host, "SLURM_TOPOLOGY_ADDR": f"spine.leaf{node // 32}.{host}",
        "SLURM_GTIDS": ",".join(str(node * PER_HOST + i) for i in range(PER_HOST)),
        "SLURM_TASK_PID": str(10000 + rank), "SLURM_CPU_BIND": "quiet,mask_cpu:0xFF", "SLURM_DISTRIBUTION": "block",
        "MASTER_ADDR": "gpu00001", "MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    }


def _nccl_account(rank: int, host: str, node: int, local: int, size: int):
    """What a rank's NCCL said (as lib/nccl_log.py parses it): IB with GDR, P2P/CUMEM and NVLS; node 7 on Socket."""
    from preflight.model.nccl_account import NcclAccount, NcclNic, NcclPlugin

    socket = node == 7
    nics = [NcclNic(0, "eth0")] if socket else [NcclNic(local, f"mlx5_{local}", 1, "IB", True)]  # its channels' NIC
    return NcclAccount(
        source="captured", host=host, pid=10000 + rank, rank=rank, nranks=size, nnodes=size // PER_HOST,
        local_ranks=PER_HOST, nccl_version="2.21.5", cuda_version="12.4",
        plugin=NcclPlugin(why="NET/Plugin: No plugin found (libnccl-net.so)"), network="Socket" if socket else "IB",
        ib_found=not socket, nics=nics, gdr=not socket, gdr_reason="the network is Socket (TCP): no RDMA" * socket,
        dmabuf=True, env_lines=["NCCL_IB_HCA=mlx5_9"] if socket else [], intra={"P2P/CUMEM": 16},
        inter={"NET/Socket/0": 2} if socket else {f"NET/IB/{local}/GDRDMA": 2}, nvls_available=True,
        nvls_used=True, communicators=3, channels=16, lines=400, nccl_lines=400)


def generate(world_kind: str, size: int, missing_hosts: int, path: str, nccl: bool = False,
             gpu_node: bool = False) -> None:
    """Write every reporting rank's encoded RankPayload to `path` (length-prefixed); with `nccl`, its
    probe report carrying its NCCL account to `path`.nccl; `gpu_node`: see synthetic_payloads."""
    from preflight.model.codec import encode

    try:  # what Exchange.publish sends
        from preflight.channel.wire import to_wire
    except ImportError:  # before issue 16: the payload as it is
        to_wire = encode
    try:  # through the store: the shared sections by digest, each written once (issue 44)
        from preflight.channel.sections import store_form
    except ImportError:
        store_form = None
    written: set[str] = set()  # the sections in the store so far
    accounts = open(path + ".nccl", "wb") if nccl else None
    with open(path, "wb") as out:
        for rank, payload in synthetic_payloads(world_kind, size, missing_hosts, gpu_node=gpu_node):
            if accounts is not None:  # what steps.publish sends: the account without rank, host, pid
                node, local = divmod(rank, PER_HOST)
                account = _nccl_account(rank, f"gpu{node + 1:05d}", node, local, size)
                report = encode(msgspec.structs.replace(account, rank=None, host="", pid=0))
                accounts.write(_HEAD.pack(len(report), rank) + report)
            data = to_wire(payload)
            if store_form is not None:
                data, sections = store_form(data)
                for digest, section in sections.items():  # before the first payload that names it
                    if digest not in written:
                        written.add(digest)
                        record = digest.encode() + b"\n" + section
                        out.write(_HEAD.pack(len(record), SECTION_RECORD) + record)
            out.write(_HEAD.pack(len(data), rank) + data)
    if accounts is not None:
        accounts.close()


def synthetic_payloads(world_kind: str, size: int, missing_hosts: int, ranks=None, light: bool = False,
                       gpu_node: bool = False):
    """(rank, RankPayload) of every reporting rank (of `ranks` only, if given), as each rank
    would publish it. `light`: the payloads share what they can (one environment dict for the
    job, with each rank's launcher variables beside it; a host's network and GPU objects), for a
    process that holds tens of thousands of them at once (benchmarks/store_scale.py); they encode
    to the same facts. `gpu_node`: each rank's health and placement as on an 8-GPU node, its own
    (gpu_node_facts.py), not the empty sections of a CPU rank."""
    from preflight.channel.exchange import RankPayload
    from preflight.model import (
        RankFacts,
        SystemLimits,
        Versions,
    )
    from preflight.registry import LOCAL, CheckContext, run_checks, select_checks
    from preflight.steps.launchers import resolve_world

    hosts = size // PER_HOST
    missing = set(range(hosts - 1 - missing_hosts, hosts - 1))  # never host 0 (rank 0 is there)
    common = _common_env()
    ctx = CheckContext(world_size=size)
    local_checks = select_checks(LOCAL, (), ())
    per_host_found: dict[int | str, tuple[list, list]] = {}
    # rank 0's World: the others' are derived from it (see _world)
    template = resolve_world({**common, **_launcher_env(world_kind, 0, size, "gpu00001", 29500)}, "gpu00001")

    def _world(env: dict[str, str], host: str, rank: int, node: int, local: int, template):
        """A rank's World as resolve_world gives it. Under Slurm resolve_world expands the whole
        node list (O(N) per rank, O(N^2) to generate a job: hours at 131,072 ranks), so beyond the
        first host each World is rank 0's with its own rank, host and variables; the first host's
        are resolved for real and must equal the derived ones (a check on the shortcut)."""
        if rank == 0:
            return template
        derived = msgspec.structs.replace(template, rank=rank, local_rank=local, node_rank=node, host=host,
                                      expected_hosts={}, raw={k: env[k] for k in template.raw})
        if node == 0:
            real = msgspec.structs.replace(resolve_world(env, host), expected_hosts={})
            assert real == derived, f"rank {rank}: the derived World differs from resolve_world's"
        return derived
    drifted = {**common, "NCCL_SOCKET_IFNAME": "eth"}
    if gpu_node:
        from gpu_node_facts import rank_health, rank_placement
    cached: tuple = (-1, None, None)  # the last host's network and GPUs (light)
    for rank in range(size) if ranks is None else ranks:
        node, local = divmod(rank, PER_HOST)
        if node in missing:
            continue
        host = f"gpu{node + 1:05d}"
        launcher = _launcher_env(world_kind, rank, size, host, 29500)
        env = {**common, **launcher}
        if node == 5:
            env["NCCL_SOCKET_IFNAME"] = "eth"  # drift on one host
        world = _world(env, host, rank, node, local, template)
        if light:
            from preflight.model.rank_env import RankEnv

            env = RankEnv(drifted if node == 5 else common, launcher)
        if light and cached[0] == node:
            network, gpus = cached[1], cached[2]
        else:
            network, gpus = _host_sections(node)
            cached = (node, network, gpus)
        facts = RankFacts(
            rank=rank, host=host, world=world, env=env,
            versions=Versions(python="3.11.9", torch="2.5.1+cu124" if rank != 77 else "2.4.0+cu121",
                              torch_cuda="12.4", gloo="yes", nccl_built="yes", nccl="2.21.5",
                              driver="550.90.07", cuda_driver="12.4"),
            system=SystemLimits(pid=10000 + rank, cpu_count=192,
                                memlock_bytes=-1 if node != 12 else 65536, shm_bytes=1 << 39),
            network=network, gpus=gpus,
        )
        if gpu_node:
            facts.health, facts.placement = rank_health(node, local), rank_placement(node, local)
        # The local checks once per kind of host (each planted fault, and a healthy one): hosts of a
        # kind differ only in names and addresses (and checks cost ~20 ms a host, 16,384 hosts here).
        kind = node if node in (0, 5, 9, 12) else "healthy"
        if kind not in per_host_found:
            found, outcomes = run_checks(local_checks, facts, ctx, 10.0, rank=rank, host=host)
            per_host_found[kind] = found, _durations_as_on_a_node(outcomes)
        found, variants = per_host_found[kind]
        outcomes = variants[rank % len(variants)]
        mine = [msgspec.structs.replace(f, ranks=[rank], hosts=[host]) for f in found]
        yield rank, RankPayload(rank, facts, mine, outcomes)


def _durations_as_on_a_node(outcomes: list) -> list[list]:
    """Variants of a host's check outcomes with durations as a GPU node's checks take (a millisecond or
    more, each rank's its own), not the microseconds this machine measured once: the report merges them
    the same way, but rank 0 holds every rank's, and how it holds them depends on their values (Python
    shares the ints up to 256). Fixed numbers, so that every run holds the same."""
    return [[msgspec.structs.replace(o, duration_s=(1000 + 37 * i + 11 * variant) / 1e6)
             for i, o in enumerate(outcomes)] for variant in range(16)]


def _host_sections(node: int):
    """A host's network facts and GPUs."""
    from preflight.model import (
        ChosenInterface,
        GpuFacts,
        IbPort,
        Interface,
        MasterAddrResolution,
        NetworkFacts,
    )

    # Keyword arguments throughout: a field added to the model must not shift these values
    # into the wrong fields (a GpuFacts.serial did, and every payload was refused).
    ib = [IbPort(device=f"mlx5_{i}", port=1, state="ACTIVE", state_code=4, phys_state="LinkUp",
                 phys_state_code=5, rate="400 Gb/sec (4X NDR)", rate_gbps=400.0, link_layer="InfiniBand",
                 netdevs=[f"ib{i}"]) for i in range(8)]
    if node == 9:
        ib[3] = IbPort(device="mlx5_3", port=1, state="DOWN", state_code=1, phys_state="Polling",
                       phys_state_code=2, link_layer="InfiniBand", netdevs=["ib3"])
    ifaces = [Interface(name="lo", up=True, mtu=65536, speed_mbps=0, addresses=["127.0.0.1", "::1"]),
              Interface(name="eth0", up=True, mtu=9001, speed_mbps=100000,
                        addresses=[f"10.0.{node // 256}.{node % 256}"])]
    ifaces += [Interface(name=f"ib{i}", up=True, mtu=4092, speed_mbps=400000,
                         addresses=[f"10.{100 + i}.{node // 256}.{node % 256}"]) for i in range(8)]
    network = NetworkFacts(
        interfaces=ifaces, ib_ports=ib,
        chosen_interface=ChosenInterface(name="ib0", source="NCCL_SOCKET_IFNAME=ib",
                                         address=ifaces[2].addresses[0], up=True, mtu=4092),
        loopback_scope=f"boot-{node:08x}:netns-4026531992",
        master_addr=MasterAddrResolution(addr="gpu00001", ips=["10.0.0.0"]),
    )
    gpus = [GpuFacts(index=i, name="NVIDIA H100 80GB HBM3",
                     uuid=f"GPU-{node:08x}-{i:04x}-{node * 8 + i:012x}", serial=f"1654{node:06d}{i:02d}",
                     pci_bus_id=f"00000000:{0x18 + i * 0x10:02X}:00.0", memory_total_bytes=85520809984,
                     nvlink_active=18, nvlink_version=4) for i in range(8)]
    return network, gpus


# Each record: its length and its rank, then the payload. The rank is what the store's key says
# (rank 0 asks for `payload/<rank>`); reading it from the payload's JSON cost the measured decode
# 0.3 s at 131,072 ranks that the real collect does not spend.
_HEAD = struct.Struct("<II")
SECTION_RECORD = 0xFFFFFFFF  # in a record's rank field: a shared section (its digest, a newline, its bytes)


def _records(path: str):
    """(rank, payload bytes) of each reporting rank, read through a 16 MiB buffer (one read call
    per payload cost 131,072 system calls)."""
    with open(path, "rb", buffering=16 << 20) as stream:
        while head := stream.read(_HEAD.size):
            length, rank = _HEAD.unpack(head)
            yield rank, stream.read(length)


def read_payloads(path: str, wanted=None) -> dict:
    """The RankPayloads in `path` (those of `wanted` ranks, if given), as rank 0 reads them."""
    from preflight.channel.wire import SharedSections, from_wire

    shared, sections = SharedSections(), {}
    payloads = {}
    for rank, raw in _records(path):
        if rank == SECTION_RECORD:
            cut = raw.index(b"\n")
            sections[raw[:cut].decode()] = raw[cut + 1:]
        elif wanted is None or rank in wanted:
            if hasattr(shared, "missing"):
                need = shared.missing([raw])
                shared.learn(need, [sections.get(d) for d in need])
            payloads[rank] = from_wire(raw, shared)
    return payloads


def _sections(path: str):
    """(digest, bytes) of each shared section in `path` (written under `shared/<digest>`)."""
    for rank, raw in _records(path):
        if rank == SECTION_RECORD:
            cut = raw.index(b"\n")
            yield raw[:cut].decode(), raw[cut + 1:]


def _payloads(path: str):
    for rank, raw in _records(path):
        if rank != SECTION_RECORD:
            yield raw


# -- measurement (a fresh process per N) ---------------------------------------------------

def measure(world_kind: str, size: int, missing_hosts: int, keep: str | None, nccl: bool = False,
            gpu_node: bool = False) -> dict[str, object]:
    """Generate in a child, then time rank 0's stages here; the payloads and reports (hundreds of MB
    at 131,072 ranks) are removed after, unless kept (--keep DIR)."""
    folder = Path(keep or tempfile.mkdtemp(prefix="pf-scale-"))
    try:
        return _measure(folder, world_kind, size, missing_hosts, keep, nccl, gpu_node)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _measure(folder: Path, world_kind: str, size: int, missing_hosts: int, keep: str | None,
             nccl: bool = False, gpu_node: bool = False) -> dict[str, object]:
    folder.mkdir(parents=True, exist_ok=True)
    data = str(folder / "payloads.bin")
    made = folder / "payloads.args"  # what generated payloads.bin: --keep DIR reuses it for the same arguments
    # the NCCL accounts are generated beside the payloads (the same payloads with or without them)
    wanted = f"{world_kind} {size} {missing_hosts} nccl{' gpu-node' if gpu_node else ''}\n"
    if not (keep and made.exists() and made.read_text() == wanted and os.path.exists(data)):
        subprocess.run([sys.executable, __file__, "--generate", data, "--ranks", str(size), "--world", world_kind,
                        "--missing-hosts", str(missing_hosts), "--nccl", *(["--gpu-node"] if gpu_node else [])],
                       check=True)
        made.write_text(wanted)
    payload_bytes = os.path.getsize(data)

    from preflight.channel.collected import Collected, accept_many
    from preflight.lib.collector import collector_paused
    try:
        from preflight.channel.collected import accept_referenced as referenced
    except ImportError:  # before issue 44: the whole payload from every rank
        referenced = None
    from preflight.model import World
    from preflight.options import RunOptions
    from preflight.registry import CROSS, CheckContext, JobView, run_checks, select_checks
    from preflight.reports import exclude, html, junit, terminal, text
    from preflight.reports import json as json_report
    from preflight.steps.gather import gather_failures
    from preflight.steps.verdict import RunRecord, build_report

    stages: dict[str, float] = {}
    rss: dict[str, int] = {}  # resident MiB after each stage: where the memory goes
    peak: dict[str, int] = {}  # the peak so far after each stage: which stage makes it
    cpu: dict[str, float] = {}  # CPU seconds: on a shared machine the wall time also counts waiting for a core

    def timed(name: str, func, *args):
        started, started_cpu = time.perf_counter(), time.process_time()
        value = func(*args)
        stages[name] = round(time.perf_counter() - started, 3)
        cpu[name] = round(time.process_time() - started_cpu, 3)
        rss[name] = _rss_mib()
        peak[name] = _peak_rss_mib()
        return value

    sections: dict[str, bytes] = {}  # the store's shared sections, by digest

    def accept(collected, ranks, raws):  # what the store collect does with each multi_get's answer
        if referenced is None:
            accept_many(collected, ranks, raws)
        else:  # the sections the chunk names, fetched once each, then the payloads; emptied once read
            for digest in referenced(collected, ranks, raws, lambda wanted: [sections.get(d) for d in wanted]):
                sections[digest] = b""

    def decode_all():
        collected = Collected()
        chunk: list[bytes] = []
        ranks: list[int] = []
        for rank, raw in _records(data):
            if rank == SECTION_RECORD:
                cut = raw.index(b"\n")
                sections[raw[:cut].decode()] = raw[cut + 1:]
                continue
            chunk.append(raw)
            ranks.append(rank)
            if len(chunk) == 1024:
                accept(collected, ranks, chunk)
                chunk, ranks = [], []
        accept(collected, ranks, chunk)
        if collected.bad_payloads:  # the generator no longer fits the model: say so, never measure less
            rank, why = next(iter(collected.bad_payloads.items()))
            raise SystemExit(f"rank0_scale: {len(collected.bad_payloads)} generated payloads refused "
                             f"(rank {rank}: {why})")
        own = collected.payloads.pop(0)
        facts, findings, outcomes = collected.merged_with(own)
        return collected, own, facts, findings + own.findings + gather_failures(facts), outcomes + own.outcomes

    collected, own, facts, findings, outcomes = timed("decode", decode_all)
    world: World = own.facts.world
    options = RunOptions(command_line="benchmark").for_world(size)
    ctx = CheckContext(world_size=size, backend=options.probes.backend)

    def cross():
        job = JobView(**msgspec.structs.asdict(ctx), ranks=facts, duplicate_ranks=collected.duplicates,
                      reachability=None)
        with collector_paused():  # as runner._lead runs them
            return run_checks(select_checks(CROSS, (), ()), job, ctx, 600.0, rank=0, host=world.host)

    def paused(func):  # the report built and written with the collector paused, as runner._finish does
        def run(*args):
            with collector_paused():
                return func(*args)
        return run

    found, cross_outcomes = timed("cross checks", cross)
    record = RunRecord(world, options)
    record.facts, record.all_facts = own.facts, facts
    record.findings, record.outcomes = findings + found, outcomes + cross_outcomes
    record.missing = collected.missing(size)
    if nccl:
        record.probes, nccl_found = timed("nccl", _nccl_stage, data + ".nccl", size, facts)
        record.findings += nccl_found
    report = timed("report", paused(build_report), record)
    out = folder / "out"
    out.mkdir(parents=True, exist_ok=True)  # preflight creates folders only inside the current directory
    paths = {name: str(out / f"report.{name}") for name in ("json", "txt", "xml", "html", "exclude")}
    timed("json", paused(json_report.write), report, paths["json"])
    timed("text", paused(text.write), report, paths["txt"])
    timed("junit", paused(junit.write), report, paths["xml"])
    timed("html", paused(html.write), report, paths["html"])
    timed("exclude", paused(exclude.write), report, paths["exclude"])
    timed("terminal", paused(terminal.render), report, io.StringIO())  # what a TTY shows (rich)

    # `preflight report` is its own process: the reload runs in a child, with its own clock and memory.
    done = subprocess.run([sys.executable, __file__, "--reload", paths["json"]], check=True, capture_output=True,
                          text=True)
    again = json.loads(done.stdout)
    stages["reload+render"], cpu["reload+render"] = again["wall_s"], again["cpu_s"]
    main_rss = _peak_rss_mib()
    # Issue 35's budget covers every stage, the reload included (before it, total_s left the reload out).
    return {
        "world": world_kind, "ranks": size, "reported": again["ranks"], "stages_s": stages,
        "total_s": round(sum(stages.values()), 3), "total_cpu_s": round(sum(cpu.values()), 3), "stages_cpu_s": cpu,
        "slowest_cross_checks": {o.check_id: round(o.duration_s, 3) for o in sorted(
            cross_outcomes, key=lambda o: -o.duration_s)[:5]},
        "load_1min": round(os.getloadavg()[0], 2),
        "peak_rss_mib": max(main_rss, again["peak_rss_mib"]), "rank0_rss_mib": main_rss,
        "reload_rss_mib": again["peak_rss_mib"], "rss_after_mib": rss, "peak_after_mib": peak,
        "json_mb": round(os.path.getsize(paths["json"]) / 1e6, 1),
        "html_mb": round(os.path.getsize(paths["html"]) / 1e6, 1),
        "payload_kb_per_rank": round(payload_bytes / max(1, again["ranks"]) / 1e3, 1),
        "findings": again["findings"], "exit_code": again["exit_code"], "nccl": nccl,
        "nccl_findings": sorted({f.check_id for f in record.findings if f.check_id.startswith("NCCL02")}),
    }


def _nccl_stage(path: str, size: int, facts):
    """Rank 0 with NCCL's accounts, as orchestrate's gather does: every rank's `nccl/<rank>` value decoded
    once per distinct bytes (Board.fetch_interned), shared by the ranks that sent the same, folded per
    host and per dimension (tp8 within hosts, the world), judged."""
    from preflight.channel import keys
    from preflight.channel.board import decode_interned
    from preflight.lib.nccl_summary import summarize
    from preflight.model.nccl_account import NcclAccount
    from preflight.model.probe_outcome import ProbeOutcome
    from preflight.steps import nccl_account

    hosts = {f.rank: f.host for f in facts}
    ranks, raws = [], []
    for rank, raw in _records(path):
        ranks.append(rank)
        raws.append(raw)
    values = decode_interned(raws, keys.NCCL_ACCOUNT, ranks)
    accounts = {r: v for r, v in zip(ranks, values, strict=True) if isinstance(v, NcclAccount)}
    groups = {"tp": [list(range(h * PER_HOST, (h + 1) * PER_HOST)) for h in range(size // PER_HOST)],
              "world": [list(range(size))]}
    outcome = ProbeOutcome(backend="nccl", nccl_accounts=accounts, nccl_hosts=hosts)  # as probes/orchestrate.py
    outcome.nccl = summarize(accounts, 0, groups, hosts)
    return outcome, nccl_account.judge(outcome, facts)


def _peak_rss_mib(field: str = "VmHWM") -> int:
    """This process's peak resident memory: VmHWM (ru_maxrss survives exec on Linux, so a child
    started by a 2 GB parent would report the parent's peak); VmRSS: now."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _rss_mib() -> int:
    return _peak_rss_mib("VmRSS")


def reload(path: str) -> dict[str, object]:
    """`preflight report`'s path in this fresh process: the JSON read back and rendered (text, HTML)."""
    from preflight.reports import html, text
    from preflight.reports import json as json_report

    started, started_cpu = time.perf_counter(), time.process_time()
    again = json_report.load(path)
    text.render(again)
    html.render(again)
    return {"wall_s": round(time.perf_counter() - started, 3), "cpu_s": round(time.process_time() - started_cpu, 3),
            "peak_rss_mib": _peak_rss_mib(), "ranks": len(again.ranks), "findings": len(again.findings),
            "exit_code": again.exit_code}


def sweep(worlds: list[str], sizes: list[int], missing_hosts: int) -> None:
    """Every (world, N) in a fresh process, one at a time; a table and the 16384/4096 ratio."""
    rows = []
    for world_kind in worlds:
        for size in sizes:
            done = subprocess.run([sys.executable, __file__, "--ranks", str(size), "--world", world_kind,
                                   "--missing-hosts", str(missing_hosts)], check=True, capture_output=True, text=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print("| world | ranks | decode | cross | report | json | text | junit | html | exclude | total s | "
          "peak RSS MiB | JSON MB | HTML MB | payload kB/rank | reload+render s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        s = row["stages_s"]
        print(f"| {row['world']} | {row['ranks']} | {s['decode']} | {s['cross checks']} | {s['report']} | {s['json']} "
              f"| {s['text']} | {s['junit']} | {s['html']} | {s['exclude']} | **{row['total_s']}** | "
              f"{row['peak_rss_mib']} | {row['json_mb']} | {row['html_mb']} | {row['payload_kb_per_rank']} | "
              f"{s['reload+render']} |")
    for world_kind in worlds:
        by = {row["ranks"]: row["total_s"] for row in rows if row["world"] == world_kind}
        if 16384 in by and 4096 in by:
            print(f"{world_kind}: 16384/4096 = {by[16384] / by[4096]:.2f}")


def compare(src: str, world_kind: str, size: int, missing_hosts: int, repeat: int, warmup: int = 1) -> None:
    """This tree against the one at `src` (its own benchmark, on payloads its own code generates),
    alternated `repeat` times, each run a fresh process; each pair's ratios and their medians. The first
    `warmup` pairs are run and printed but not counted: a tree's first run reads the payloads its
    generator has just written (the tree before issue 44: 2.9 GB), and on a machine whose page cache
    is small its first pair was the lowest of every run (0.37-0.44 against 0.46-0.52 after it)."""
    import statistics

    trees = {"this tree": str(Path(__file__).resolve().parents[1]), src: os.path.abspath(src)}
    keep = {name: tempfile.mkdtemp(prefix="pf-compare-") for name in trees}  # generated once per tree
    rows: dict[str, list[dict]] = {name: [] for name in trees}
    try:
        for run in range(warmup + repeat):
            for name, root in trees.items():
                done = subprocess.run(
                    [sys.executable, os.path.join(root, "benchmarks", "rank0_scale.py"), "--ranks", str(size),
                     "--world", world_kind, "--missing-hosts", str(missing_hosts), "--keep", keep[name]],
                    check=True, capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": root})
                row = json.loads(done.stdout.strip().splitlines()[-1])
                if run >= warmup:
                    rows[name].append(row)
                print(json.dumps({"tree": name, **({"warm_up": True} if run < warmup else {}), **row}), flush=True)
    finally:
        for folder in keep.values():
            shutil.rmtree(folder, ignore_errors=True)
    figures = ("total_cpu_s", "total_s", "peak_rss_mib", "payload_kb_per_rank")
    print(f"\n| {size} ranks, {world_kind}, median of {repeat} | " + " | ".join(figures) + " | load (1 min) |")
    print("|---|" + "---|" * (len(figures) + 1))
    for name in trees:
        medians = [statistics.median(row[f] for row in rows[name]) for f in figures]
        loads = [row["load_1min"] for row in rows[name]]
        print(f"| {name} | " + " | ".join(str(m) for m in medians) + f" | {min(loads)}-{max(loads)} |")
    this, other = rows["this tree"], rows[src]
    ratios = [statistics.median(a[f] / b[f] for a, b in zip(this, other, strict=True)) for f in figures]
    print("| this / that, median of the pairs | " + " | ".join(f"{r:.2f}" for r in ratios) + " | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare-src", metavar="DIR",
                        help="also run the benchmark of the source tree at DIR (alternated), and print the ratios")
    parser.add_argument("--repeat", type=int, default=3, help="with --compare-src: runs of each tree")
    parser.add_argument("--warmup", type=int, default=1,
                        help="with --compare-src: pairs run first and not counted (default 1; 0: every pair counts)")
    parser.add_argument("--ranks", type=int)
    parser.add_argument("--world", choices=("torchrun", "slurm"))
    parser.add_argument("--missing-hosts", type=int, default=1)
    parser.add_argument("--generate", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--reload", metavar="JSON", help=argparse.SUPPRESS)
    parser.add_argument("--keep", metavar="DIR",
                        help="keep the payloads and reports here (reused by a later run with the same arguments)")
    parser.add_argument("--nccl", action="store_true",
                        help="include NCCL's account (each rank's NcclAccount: decode, summary, checks, report)")
    parser.add_argument("--gpu-node", action="store_true",
                        help="each rank's health and placement as on an 8-GPU node, its own (default: off, the "
                             "empty sections of a CPU rank; this tree only: not with --compare-src)")
    args = parser.parse_args()
    if args.gpu_node and args.compare_src:  # the other tree's copy of this benchmark has no such ranks
        parser.error("--gpu-node measures this tree only: not with --compare-src")
    if args.reload:
        print(json.dumps(reload(args.reload)))
    elif args.generate:
        generate(args.world, args.ranks, args.missing_hosts, args.generate, args.nccl, args.gpu_node)
    elif args.compare_src:
        compare(args.compare_src, args.world or "slurm", args.ranks or 16384, args.missing_hosts, args.repeat,
                args.warmup)
    elif args.ranks and args.world:
        print(json.dumps(measure(args.world, args.ranks, args.missing_hosts, args.keep, args.nccl, args.gpu_node)))
    else:
        sweep([args.world] if args.world else ["torchrun", "slurm"], [args.ranks] if args.ranks else list(SIZES),
              args.missing_hosts)


if __name__ == "__main__":
    main()
