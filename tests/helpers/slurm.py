"""A real Slurm (slurmctld + slurmd + munged, Debian's 22.05), for launcher tests. Two kinds:

- `start_cluster`: several fake nodes share this host through multiple-slurmd support
  (`slurmd -N nodeX`, one port each). Node names do not resolve, so tests export
  MASTER_ADDR=127.0.0.1.
- `start_netns_cluster`: one slurmd in each network-namespace host of tests/helpers/netns.py
  (own hostname, /etc/hosts, ib0 and eth0), slurmctld beside the first one; Slurm talks over
  eth0, the job's traffic goes where the hosts file points (ib0), as on a cluster with a
  management network. Clients run inside the first host (`SlurmCluster.client`).

Everything lives in a temporary directory; /etc/slurm is never touched, so clients need
SLURM_CONF, which `SlurmCluster.env()` provides. munged runs in the root namespace: its socket
is a path, reachable from every network namespace.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.hosts import FakeHost
from tests.helpers.ranks import exited

CONF_TEMPLATE = """\
ClusterName=pftest
SlurmctldHost={ctld_host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool/slurmd-%n
SlurmctldPidFile={base}/pid/slurmctld.pid
SlurmdPidFile={base}/pid/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
InactiveLimit=0
KillWait=5
MinJobAge=30
SlurmctldTimeout=30
SlurmdTimeout=30
{node_line}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """A running Slurm: `node_names` in order; `client` the host clients run on (None: this one)."""

    base: Path
    node_names: list[str]
    client: FakeHost | None = None
    names_resolve: bool = False  # the node names resolve (netns hosts): no MASTER_ADDR override
    hosts: Sequence[FakeHost] = ()  # the netns hosts, in node order (to shape or break one); () otherwise

    @property
    def nodes(self) -> int:
        """How many nodes."""
        return len(self.node_names)

    @property
    def conf(self) -> Path:
        """The slurm.conf clients must use."""
        return self.base / "etc" / "slurm.conf"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for srun/sbatch against this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update({"SLURM_CONF": str(self.conf), "OMP_NUM_THREADS": "1"})
        if not self.names_resolve:
            env["MASTER_ADDR"] = "127.0.0.1"
        env.update(extra or {})
        return env

    def command(self, argv: Sequence[str]) -> list[str]:
        """argv as a client runs it (inside `client` where there is one)."""
        return self.client.command(argv) if self.client else list(argv)

    def submit(self, script: Path, options: list[str], script_args: list[str], env: dict[str, str],
               cwd: Path | None = None) -> str:
        """`sbatch --parsable`; the job id."""
        command = ["sbatch", "--parsable", *options, str(script), *script_args]
        return subprocess.run(self.command(command), env=env, check=True, capture_output=True, text=True, timeout=30,
                              cwd=cwd).stdout.strip().split(";")[0]

    def wait(self, job_id: str, timeout: float = 180) -> str:
        """Poll `scontrol show job` every 0.2 s (sbatch --wait polls coarsely) until the job ends;
        its final state line (JobState=..., ExitCode=...)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = subprocess.run(self.command(["scontrol", "show", "job", job_id, "-o"]), env=self.env(),
                                  capture_output=True, text=True, timeout=30).stdout
            state = next((w.split("=", 1)[1] for w in line.split() if w.startswith("JobState=")), "")
            if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                return line
            time.sleep(0.2)
        raise TimeoutError(f"job {job_id} did not finish within {timeout}s")

    def sbatch(self, script: Path, options: list[str], script_args: list[str], env: dict[str, str],
               timeout: float = 180, cwd: Path | None = None) -> tuple[str, str]:
        """Submit and wait; return (job id, final state line)."""
        job_id = self.submit(script, options, script_args, env, cwd)
        return job_id, self.wait(job_id, timeout)


def _write_conf(base: Path, names: Sequence[str], ctld_host: str, node_line: str, ctld_port: int) -> None:
    for sub in ("etc", "state", "log", "pid", "munge"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for name in names:
        (base / "spool" / f"slurmd-{name}").mkdir(parents=True, exist_ok=True)
    (base / "etc" / "slurm.conf").write_text(CONF_TEMPLATE.format(
        base=base, ctld_host=ctld_host, node_line=node_line, ctld_port=ctld_port,
        munge_socket=base / "munge" / "munge.socket.2"))


def _start_munge(base: Path) -> None:
    munge_dir = base / "munge"
    os.chmod(base, 0o755)
    os.chmod(munge_dir, 0o755)  # munged demands o+x on its socket's directory
    shutil.chown(munge_dir, "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged", f"--socket={munge_dir}/munge.socket.2",
                    f"--pid-file={munge_dir}/munged.pid", f"--log-file={munge_dir}/munged.log",
                    f"--seed-file={munge_dir}/munged.seed", "--key-file=/etc/munge/munge.key"],
                   check=True, timeout=30)


def start_cluster(base: Path, nodes: int = 2, ctld_port: int = 16817, slurmd_port: int = 16818) -> SlurmCluster:
    """Write the config, start munged, slurmctld and one slurmd per node; wait until idle."""
    names = [f"node{n}" for n in range(1, nodes + 1)]
    _write_conf(base, names, "localhost",
                f"NodeName=node[1-{nodes}] NodeAddr=127.0.0.1 Port=[{slurmd_port}-{slurmd_port + nodes - 1}] "
                "CPUs=8 RealMemory=2000 State=UNKNOWN", ctld_port)
    _start_munge(base)
    cluster = SlurmCluster(base, names)
    conf = str(cluster.conf)
    subprocess.run(["/usr/sbin/slurmctld", "-f", conf, "-i"], check=True, timeout=30)
    for name in names:
        subprocess.run(["/usr/sbin/slurmd", "-f", conf, "-N", name], check=True, timeout=30)
    return _wait_idle(cluster)


# `ip netns exec` remounts /sys, leaving /sys/fs/cgroup empty, and slurmd 22.05 refuses to start
# without it ("No filesystem mounted on /sys/fs/cgroup"), even with proctrack/linuxproc: give
# each host a cgroup v1 tree like the machine's (the name=systemd one is required too).
_CGROUPS = ("mount -t tmpfs cgroup_root /sys/fs/cgroup && for c in freezer cpuset memory devices; do "
            "mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c $c /sys/fs/cgroup/$c; done && "
            "mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd systemd /sys/fs/cgroup/systemd")


def start_netns_cluster(base: Path, hosts: Sequence[FakeHost], addresses: Sequence[str],
                        ctld_port: int = 6817) -> SlurmCluster:
    """One slurmd per network-namespace host (Slurm over `addresses`, e.g. each host's eth0),
    slurmctld in the first host; wait until every node is idle."""
    names = [host.hostname for host in hosts]
    node_lines = "\n".join(f"NodeName={name} NodeAddr={addr} CPUs=8 RealMemory=2000 State=UNKNOWN"
                           for name, addr in zip(names, addresses))
    _write_conf(base, names, f"{names[0]}({addresses[0]})", node_lines, ctld_port)
    _start_munge(base)
    cluster = SlurmCluster(base, names, client=hosts[0], names_resolve=True, hosts=list(hosts))
    conf = str(cluster.conf)
    hosts[0].run(["/usr/sbin/slurmctld", "-f", conf, "-i"], timeout=30)
    for host in hosts:
        host.run(["sh", "-c", f"{_CGROUPS} && exec /usr/sbin/slurmd -f {conf}"], timeout=30)
    return _wait_idle(cluster)


def _wait_idle(cluster: SlurmCluster) -> SlurmCluster:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        idle = subprocess.run(cluster.command(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"]), env=cluster.env(),
                              capture_output=True, text=True, timeout=30).stdout.split()
        if len(idle) >= cluster.nodes:
            return cluster
        time.sleep(0.25)
    stop_cluster(cluster)
    base = cluster.base
    logs = "\n".join(p.read_text()[-2000:] for p in (base / "log").glob("*.log"))
    raise RuntimeError(f"slurm did not become idle:\n{logs}")


def _terminate(pid_files: list[Path], wait_s: float = 10) -> None:
    pids = []
    for path in pid_files:
        try:
            pid = int(path.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + wait_s
    while pids and time.monotonic() < deadline:
        # A zombie has exited (waiting for init to reap it was 2 s of every cluster's stop).
        pids = [p for p in pids if not exited(p)]
        time.sleep(0.1)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def stop_cluster(cluster: SlurmCluster) -> None:
    """Cancel jobs, stop the daemons (slurmd/slurmctld before munged, which they need to exit)."""
    subprocess.run(cluster.command(["scancel", "--user=root"]), env=cluster.env(), capture_output=True, timeout=30)
    pid_dir = cluster.base / "pid"
    _terminate([*pid_dir.glob("slurmd-*.pid"), pid_dir / "slurmctld.pid"])
    _terminate([cluster.base / "munge" / "munged.pid"])
