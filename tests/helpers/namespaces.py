"""Run one rank as if on another host: its own hostname, /etc/hosts, /dev/shm and limits.

Real kernel namespaces (unshare --uts --mount, root only), not fakes: the rank's
socket.gethostname(), getaddrinfo(), statvfs('/dev/shm') and getrlimit() see what the
wrapper set, exactly as on another machine. Everything dies with the rank's process.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.helpers.tools import require_root, require_tool


def host_wrapper(hostname: str, tmp_path: Path, *, hosts: dict[str, str] | None = None,
                 shm_size: str | None = None, memlock_kib: int | None = None,
                 binds: dict[Path, Path] | None = None) -> list[str]:
    """A command prefix `[unshare ... sh -c '...; exec "$@"' sh]` to put before a rank's argv.

    hosts: name -> address entries for this rank's private /etc/hosts (the hostname itself
    always resolves to 127.0.0.1). shm_size: a tmpfs size for a private /dev/shm ("64m").
    memlock_kib: a lower `ulimit -l` (KiB; raising it needs CAP_SYS_RESOURCE, which this VM lacks).
    binds: source -> existing target folder, bind-mounted for this rank only (e.g. what a
    shared --sysfs-root path shows to this rank).
    """
    require_root()
    unshare = require_tool("unshare")
    folder = tmp_path / f"host-{hostname}-{len(list(tmp_path.glob('host-*')))}"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"127.0.0.1 localhost {hostname}", "::1 localhost ip6-localhost"]
    lines += [f"{address} {name}" for name, address in (hosts or {}).items()]
    hosts_file = folder / "hosts"
    hosts_file.write_text("\n".join(lines) + "\n")
    steps = [f"mount --bind {shlex.quote(str(hosts_file))} /etc/hosts", f"hostname {shlex.quote(hostname)}"]
    for source, target in (binds or {}).items():
        steps.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}")
    if shm_size:
        steps.append(f"mount -t tmpfs -o size={shlex.quote(shm_size)} tmpfs /dev/shm")
    if memlock_kib is not None:
        steps.append(f"ulimit -l {memlock_kib}")
    script = " && ".join(steps) + ' && exec "$@"'
    return [unshare, "--uts", "--mount", "sh", "-c", script, "sh"]
