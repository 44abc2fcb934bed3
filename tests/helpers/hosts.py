"""Fake hosts: the one way tests make a process look as if it ran on another machine.

A FakeHost is real kernel namespaces, never a patched Python function: every process started
through `host.command(argv)` / `host.popen` / `host.run` (or placed on it by
tests/helpers/ranks.spawn_env_ranks) runs under

- its own UTS namespace: `hostname`, `socket.gethostname()` say `host.hostname`;
- its own mount namespace: a private /etc/hosts (the host's name and the entries it was given),
  and optionally a tmpfs /dev/shm of `shm_size`, and `binds` (source -> existing target) seen
  by this host only (e.g. a data-only sysfs tree under a shared --sysfs-root);
- optionally a lower `ulimit -l` (`memlock_kib`; raising it needs CAP_SYS_RESOURCE);
- optionally a cgroup every process joins first (`cgroup`: a cgroup v1 or v2 directory, e.g. a
  blkio throttle from tests/helpers/slow_disk.py: the host's disk is slow, nobody else's);
- optionally a network namespace (`netns`): its own interfaces and addresses. Those hosts are
  built by tests/helpers/netns.py (veths on bridges, needs root), which adds the network
  faults (link down, tbf shaping, nftables drops).

`socket.getaddrinfo`, `statvfs('/dev/shm')`, `getrlimit`, /sys/class/net: preflight sees what
the host says, exactly as on another machine. Everything dies with the process, the hosts' anchors
(a `sleep` per host that holds its namespaces) when the process that started them exits.

Needs util-linux `unshare` with UTS + mount namespaces: as root, or as any user where the
kernel allows unprivileged user namespaces (then `unshare --user --map-root-user`). Without
them a test skips with a reason saying what to install or enable; under CI=true it fails
(tests/helpers/tools.py).

The only other test-side hook is tests/helpers/ranks.plant_env (one `sitecustomize.py` that
plants code into chosen ranks); it never fakes a host.
"""

from __future__ import annotations

import atexit
import functools
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflight.lib.waiting import wait_until
from tests.helpers.tools import require, require_tool

NAMESPACES_HELP = ("fake hosts need util-linux `unshare` with UTS and mount namespaces: run the tests as root "
                   "(in a container: --privileged or CAP_SYS_ADMIN), or enable unprivileged user namespaces "
                   "(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0)")


# Every anchor this process started. A `sleep infinity` outlives the test process that started it (one
# clean clone's suite left 51 behind, each holding a host's mount namespace): the process kills them as it
# exits, whichever test or fixture made the host.
_ANCHORS: list[subprocess.Popen[Any]] = []


def _kill_running(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """Kill each process that is still running, and reap it (waiting at most 10 s for each)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


atexit.register(_kill_running, _ANCHORS)


@dataclass
class FakeHost:
    """A host this machine pretends to be: what every process started through it sees."""

    hostname: str
    hosts_file: Path  # bind-mounted over /etc/hosts
    netns: str | None = None  # a network namespace to run in (tests/helpers/netns.py)
    shm_size: str | None = None  # a private tmpfs /dev/shm of this size ("64m")
    memlock_kib: int | None = None  # `ulimit -l`, lower than the machine's
    binds: Mapping[Path, Path] = field(default_factory=dict)  # source -> existing target
    cgroup: Path | None = None  # a cgroup directory every process started here joins (cgroup.procs)
    _procs: list[subprocess.Popen[Any]] = field(default_factory=list, repr=False)
    # A `sleep` started here, whose namespaces the ranks forked for this host enter (entry()).
    _anchor: subprocess.Popen[Any] | None = field(default=None, repr=False, compare=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """argv wrapped so it runs on this host."""
        steps = [f"mount --bind {shlex.quote(str(self.hosts_file))} /etc/hosts",
                 f"hostname {shlex.quote(self.hostname)}"]
        steps += [f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}"
                  for source, target in self.binds.items()]
        if self.shm_size:
            steps.append(f"mount -t tmpfs -o size={shlex.quote(self.shm_size)} tmpfs /dev/shm")
        if self.memlock_kib is not None:
            steps.append(f"ulimit -l {self.memlock_kib}")
        inner = [*_unshare(), "sh", "-c", " && ".join(steps) + ' && exec "$@"', "sh", *argv]
        # `ip netns exec` also remounts /sys, so /sys/class/net lists the namespace's interfaces.
        hosted = ["ip", "netns", "exec", self.netns, *inner] if self.netns else inner
        if self.cgroup is None:
            return hosted
        # Joined first, before `ip netns exec` hides /sys/fs/cgroup; children stay in it.
        join = f"echo $$ > {shlex.quote(str(self.cgroup / 'cgroup.procs'))}"
        return ["sh", "-c", join + ' && exec "$@"', "sh", *hosted]

    def entry(self) -> dict[str, Any]:
        """What a process forked elsewhere enters to run here (tests/helpers/zygote.py `_enter`): the pid of
        the anchor that holds this host's namespaces (started on first use, and again when the host's
        set-up changed: its command), this host's cgroup and `ulimit -l`."""
        argv = ["sleep", "infinity"]
        anchor = self._anchor
        if anchor is None or anchor.poll() is not None or anchor.args != self.command(argv):
            anchor = self._anchor = self.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            _ANCHORS[:] = [a for a in _ANCHORS if a.poll() is None] + [anchor]
            _until_running(anchor, "sleep")
        return {"anchor": anchor.pid, "cgroup": str(self.cgroup) if self.cgroup else None,
                "memlock_kib": self.memlock_kib}

    def popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start argv on this host; kill_started() kills it if it is still running."""
        return self.adopt(subprocess.Popen(self.command(argv), env=dict(env) if env is not None else None, **kwargs))

    def adopt(self, proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
        """Count `proc` among this host's processes (kill_started kills it); returns it."""
        self._procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run argv on this host to completion (text output captured)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), check=check, timeout=timeout, **kwargs)

    def kill_started(self) -> None:
        """Kill every process started here with popen() that is still running."""
        _kill_running(self._procs)


def fake_host(folder: Path, hostname: str, *, hosts: Mapping[str, str] | None = None, **options: Any) -> FakeHost:
    """A FakeHost with its own /etc/hosts (see hosts_file); `options` are FakeHost's fields
    (shm_size, memlock_kib, binds). Skips (laptop) or fails (CI) without namespaces."""
    require_namespaces()
    return FakeHost(hostname, hosts_file(folder, hostname, hosts), **options)


def hosts_file(folder: Path, hostname: str, hosts: Mapping[str, str] | None = None) -> Path:
    """A new /etc/hosts for one fake host under `folder`: localhost, `hosts` (name -> address), the hostname.

    The hostname resolves to 127.0.0.1 unless `hosts` names it."""
    hosts = dict(hosts or {})
    here = folder / f"host-{hostname}-{len(list(folder.glob('host-*')))}"
    here.mkdir(parents=True, exist_ok=True)
    lines = ["127.0.0.1 localhost" + ("" if hostname in hosts else f" {hostname}"), "::1 localhost ip6-localhost"]
    lines += [f"{address} {name}" for name, address in hosts.items()]
    (here / "hosts").write_text("\n".join(lines) + "\n")
    return here / "hosts"


def require_namespaces() -> None:
    """Skip (laptop) or fail (CI=true) unless this user can make UTS + mount namespaces."""
    require_tool("unshare", package="util-linux")
    works, error = _namespaces_work()
    require(works, f"{NAMESPACES_HELP} ({error})")


def _until_running(proc: subprocess.Popen[Any], comm: str, timeout_s: float = 60) -> None:
    """Wait until `proc` has exec'd `comm`: the namespaces, mounts and hostname set up before it are final."""
    def running() -> bool:
        try:
            return Path(f"/proc/{proc.pid}/comm").read_text().strip() == comm
        except OSError:
            return False

    if not wait_until(running, timeout_s, stop_if=lambda: proc.poll() is not None):
        raise RuntimeError(f"a fake host's anchor ended ({proc.poll()}) or did not start within {timeout_s:g} s: "
                           f"{proc.args}")


def _unshare() -> list[str]:
    """unshare with new UTS and mount namespaces; a non-root user maps itself to root in a user namespace."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [require_tool("unshare", package="util-linux"), *user, "--uts", "--mount"]


@functools.cache
def _namespaces_work() -> tuple[bool, str]:
    """Try once per session what a FakeHost does: a hostname and a bind mount in new namespaces."""
    try:
        probe = subprocess.run([*_unshare(), "sh", "-c", "hostname pf-probe && mount --bind /etc/hosts /etc/hosts"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return probe.returncode == 0, probe.stderr.strip()
