"""Read NCCL INFO/WARN logs into NcclAccounts (model/nccl_account.py), one per NCCL process.

Understands the line shapes of NCCL 2.18 to 2.30 (their format strings, with the source file
and release of each, are in tests/fixtures/nccl_log/formats.json): the `host:pid:tid [dev] NCCL
INFO ` prefix with or without 2.26's timestamp, WARN lines with `file:line` and (2.30) the
function, the bare `NCCL version` banner of 2.18-2.21, and any text a launcher put in front of
a line (srun --label's `3: `, torchrun's `[rank3]:`). A log of several ranks, in several files or
interleaved in one, is told apart by `host:pid` (the `[n]` in the prefix is the CUDA device, not
the rank: the rank is read from the communicator's own `rank %d nranks %d` line).

Bounded whatever the input: at most MAX_READ_BYTES of a file are read (the rest counted in
`truncated_bytes`: NCCL states its choices while communicators form, at the top), a line over
MAX_LINE bytes, one with a NUL or invalid UTF-8, or an NCCL line whose prefix is broken is
counted as unreadable and skipped, at most MAX_STREAMS processes per file are kept. Nothing
raises on content; only the file's opening can fail (OSError).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from msgspec import Struct, field

from preflight.model.nccl_account import (
    MAX_NICS,
    MAX_TEXT,
    MAX_TRANSPORTS,
    MAX_WARNINGS,
    NcclAccount,
    NcclNic,
)

MAX_READ_BYTES = 64 * 2**20
MAX_LINE = 4096
MAX_STREAMS = 4096
MAX_ENV_LINES = 16
ENV_PREFIXES = ("NCCL_IB_", "NCCL_NET", "NCCL_P2P", "NCCL_SHM", "NCCL_NVLS", "NCCL_SOCKET", "NCCL_CUMEM",
                "NCCL_COLLNET", "NCCL_DMABUF", "NCCL_GDR")

_PREFIX = re.compile(
    r"(?P<host>[A-Za-z0-9_.\-]{1,255}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) \[(?P<dev>\d{1,6})\] "
    r"(?:(?P<where>\S{1,300}:\d{1,7}(?: \([^)]{0,300}\))?) )?NCCL (?P<level>INFO|WARN|TRACE) ?")
_BANNER = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)\S*?(?:\+cuda(?P<cuda>\d+\.\d+))?\s*$")
_IB_DEV = re.compile(r"\[(\d+)\]([^\s:\[\]]+):(\d+)(?::\d*)*/([A-Za-z]+)")
_SOCKET_DEV = re.compile(r"\[(\d+)\]([^\s:\[\]]+):(\S+)")
_GDR_HCA = re.compile(
    r"^NET/(?P<net>.+?) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<n>\d+) '(?P<dev>[^']*)'")
_DISTANCE = re.compile(r"distance (\d+) >=? (\d+)")
_ENV = re.compile(r"^(NCCL_[A-Z0-9_]{1,64}) set (?:by environment )?to (.{0,120}?)\.?$")
_CHANNEL = re.compile(r"^(?:Channel|CollNet|Ring) (\d+)(?:/\d+)? : .*? via (?P<via>\S.*)$")
_COMM = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)")
_INIT_START = re.compile(r"comm (?:0x)?[0-9a-fA-F]+ rank (\d+) nranks (\d+) .*- Init START")


class _Stream(Struct):
    """One process's lines as they are read."""

    account: NcclAccount
    ib_nics: list[NcclNic] = field(default_factory=list)
    socket_nics: list[NcclNic] = field(default_factory=list)
    hca_gdr: dict[str, bool] = field(default_factory=dict)
    distance: str = ""
    gdr_env: str = ""
    channel_max: int = -1


class LogRead(Struct):
    """What one file held: an account per NCCL process, and how much of it could be read."""

    path: str
    accounts: list[NcclAccount] = field(default_factory=list)
    lines: int = 0
    nccl_lines: int = 0
    unreadable: int = 0
    truncated_bytes: int = 0
    streams_dropped: int = 0  # processes past MAX_STREAMS

    def is_nccl_log(self) -> bool:
        """Whether any line of it was NCCL's."""
        return self.nccl_lines > 0


def read_log_file(path: str, max_bytes: int = MAX_READ_BYTES) -> LogRead:
    """Parse one log file (OSError when it cannot be opened or is not a regular file)."""
    with open(path, "rb") as handle:
        if not os.path.isfile(path):
            raise OSError(f"{path}: not a regular file")
        size = os.fstat(handle.fileno()).st_size
        read = parse_lines(_bounded_lines(handle, max_bytes), path)
    read.truncated_bytes = max(0, size - max_bytes)
    for account in read.accounts:
        account.truncated_bytes = read.truncated_bytes
    return read


def _bounded_lines(handle: BinaryIO, max_bytes: int) -> Iterator[bytes | None]:
    """The file's lines within max_bytes; None for a line over MAX_LINE bytes (skipped to its end)."""
    left = max_bytes
    while left > 0:
        line = handle.readline(min(MAX_LINE + 1, left))
        if not line:
            return
        left -= len(line)
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while left > 0:  # the rest of the overlong line, within the same byte budget
                rest = handle.readline(min(1 << 20, left))
                left -= len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield None
            continue
        yield line


def parse_lines(lines: Iterable[bytes | str | None], source: str = "") -> LogRead:
    """Parse lines (bytes, text, or None for one that could not be read) into a LogRead."""
    read = LogRead(source)
    streams: dict[tuple[str, int], _Stream] = {}
    banner: tuple[str, str] | None = None
    for raw in lines:
        read.lines += 1
        text = _text(raw)
        if text is None:
            read.unreadable += 1
            continue
        if "NCCL " not in text:
            continue
        match = _PREFIX.search(text)
        if match is None:
            found = _BANNER.search(text)
            if found is not None and text.lstrip().startswith("NCCL version"):
                banner = (found["version"], found["cuda"] or "")
                read.nccl_lines += 1
            elif " NCCL INFO " in text or " NCCL WARN " in text:
                read.unreadable += 1  # NCCL's marker without NCCL's prefix: a cut or mangled line
            continue
        read.nccl_lines += 1
        key = (match["host"], int(match["pid"]))
        stream = streams.get(key)
        if stream is None:
            if len(streams) >= MAX_STREAMS:
                read.streams_dropped += 1
                continue
            stream = streams[key] = _Stream(NcclAccount(source=source, host=key[0], pid=key[1]))
        body = text[match.end():].rstrip("\r\n")
        stream.account.nccl_lines += 1
        if match["level"] == "WARN":
            _warn(stream.account, match["where"] or "", body)
        elif match["level"] == "INFO":
            _info(stream, body)
    for stream in streams.values():
        read.accounts.append(_finish(stream, banner))
    for account in read.accounts:
        account.lines, account.unreadable = read.lines, read.unreadable
    return read


def _text(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, bytes):
        if b"\x00" in raw:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None if "\x00" in raw else raw


def _warn(account: NcclAccount, where: str, body: str) -> None:
    account.warnings_total += 1
    if len(account.warnings) < MAX_WARNINGS:
        text = f"{where} {body}".strip() if where else body
        account.warnings.append(text[:MAX_TEXT])


def _info(stream: _Stream, body: str) -> None:
    account = stream.account
    if body.startswith("Channel ") or body.startswith("CollNet ") or body.startswith("Ring "):
        _channel(stream, body)
    elif body.startswith("NCCL version "):
        found = _BANNER.match(body)
        if found is not None:
            account.nccl_version, account.cuda_version = found["version"], found["cuda"] or ""
    elif body.startswith("Using network "):
        account.network = body[len("Using network "):].strip()[:64]
    elif body.startswith("NET/IB : No device found"):
        account.ib_found = False
    elif body.startswith("NET/IB : Using"):
        account.ib_found = bool(_IB_DEV.search(body))
        found = _IB_DEV.findall(body)[:MAX_NICS]
        stream.ib_nics = [NcclNic(int(i), dev, int(port), layer) for i, dev, port, layer in found]
    elif body.startswith("NET/Socket : Using"):
        stream.socket_nics = [NcclNic(int(i), dev) for i, dev, _ in _SOCKET_DEV.findall(body)][:MAX_NICS]
    elif "Plugin" in body[:24] and body.startswith(("NET/Plugin", "Plugin name")):
        _plugin(account, body)
    elif "GPU Direct RDMA" in body:
        _gdr(stream, body)
    elif body.startswith("DMA-BUF is available"):
        account.dmabuf = True
    elif body.startswith("NVLS multicast support is "):
        account.nvls_available = not body.startswith("NVLS multicast support is not")
    elif body.startswith("NVLS comm "):
        account.nvls_used = True
    elif " set " in body and body.startswith("NCCL_"):
        _env(stream, body)
    elif "Init START" in body:
        account.communicators += 1
        found = _INIT_START.search(body)
        if found is not None:
            _comm(account, int(found[1]), int(found[2]))
    elif " nNodes " in body:
        found = _COMM.search(body)
        if found is not None:
            _comm(account, int(found[1]), int(found[2]))
            account.nnodes = max(account.nnodes, int(found[3]))
            account.local_ranks = max(account.local_ranks, int(found[4]))


def _comm(account: NcclAccount, rank: int, nranks: int) -> None:
    if account.rank is None:
        account.rank = rank  # the first communicator a process forms is, in practice, its world
    account.nranks = max(account.nranks, nranks)


def _channel(stream: _Stream, body: str) -> None:
    found = _CHANNEL.match(body)
    if found is None:
        return
    stream.channel_max = max(stream.channel_max, int(found[1]))
    via = found["via"].split(" ")[0] if found["via"].startswith(("NET/", "COLLNET/")) else found["via"]
    via = via.strip()[:80]
    bucket = stream.account.inter if via.startswith(("NET/", "COLLNET/")) else stream.account.intra
    if via in bucket or len(bucket) < MAX_TRANSPORTS:
        bucket[via] = bucket.get(via, 0) + 1


def _plugin(account: NcclAccount, body: str) -> None:
    if "Loaded net plugin " in body:
        name = body.split("Loaded net plugin ", 1)[1]
        account.plugin.loaded = True
        account.plugin.name = name.rsplit(" (v", 1)[0].strip()[:64]
    elif not account.plugin.why and ("No plugin found" in body or "Could not find" in body or "Plugin load" in body):
        account.plugin.why = body[:MAX_TEXT]


def _gdr(stream: _Stream, body: str) -> None:
    found = _GDR_HCA.match(body)
    if found is not None:
        stream.hca_gdr[found["dev"]] = found["state"] == "Enabled"
        return
    if "Disabled for GPU" in body:
        distance = _DISTANCE.search(body)
        if distance is not None and not stream.distance:
            stream.distance = f"GPU-NIC distance {distance[1]} > NCCL_NET_GDR_LEVEL {distance[2]}"


def _env(stream: _Stream, body: str) -> None:
    found = _ENV.match(body)
    if found is None:
        return
    name, value = found[1], found[2].strip()
    account = stream.account
    if name.startswith(ENV_PREFIXES) and len(account.env_lines) < MAX_ENV_LINES:
        account.env_lines.append(f"{name}={value}"[:MAX_TEXT])
    if name in ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL", "NCCL_NET_GDR_READ") and not stream.gdr_env:
        stream.gdr_env = f"{name}={value}"


def _finish(stream: _Stream, banner: tuple[str, str] | None) -> NcclAccount:
    account = stream.account
    if not account.nccl_version and banner is not None:
        account.nccl_version, account.cuda_version = banner
    account.channels = stream.channel_max + 1
    network = account.network
    nics = stream.socket_nics if network == "Socket" else stream.ib_nics or stream.socket_nics
    used = _nic_indices(account.inter)
    if used and any(nic.index in used for nic in nics):
        nics = [nic for nic in nics if nic.index in used]  # the NICs this rank's channels went through
    for nic in nics:
        nic.gdr = stream.hca_gdr.get(nic.device)
    account.nics = nics
    account.gdr = _gdr_used(account, stream)
    if account.gdr is False:
        account.gdr_reason = _gdr_reason(account, stream)
    return account


_NET_DEV = re.compile(r"^(?:NET|COLLNET)/.+?/(\d+)(?:\(\d+\))?(?:/|$)")


def _nic_indices(inter: dict[str, int]) -> set[int]:
    """The NIC indices of NCCL's network channels (`NET/IB/3/GDRDMA` -> 3)."""
    found = set()
    for name in inter:
        match = _NET_DEV.match(name)
        if match is not None:
            found.add(int(match[1]))
    return found


def _gdr_used(account: NcclAccount, stream: _Stream) -> bool | None:
    """True/False from the network channels (`/GDRDMA`); without any, from the HCA lines; else None."""
    net = [name for name in account.inter if name.startswith("NET/")]
    if net:
        return any("/GDRDMA" in name for name in net)
    if account.network == "Socket":
        return False
    if stream.hca_gdr:
        return any(stream.hca_gdr.values())
    return None


def _gdr_reason(account: NcclAccount, stream: _Stream) -> str:
    if account.network == "Socket":
        return "the network is Socket (TCP): no RDMA"
    if stream.gdr_env:
        return f"{stream.gdr_env} set by environment"
    if stream.distance:
        return stream.distance
    disabled = [name for name, on in stream.hca_gdr.items() if not on]
    if disabled:
        dmabuf = ("DMA-BUF is available on the GPU, so the NIC or its kernel lacks DMA-BUF support"
                  if account.dmabuf else "and no DMA-BUF either")
        return (f"NCCL: GPU Direct RDMA Disabled for HCA '{disabled[0]}': nvidia-peermem not loaded, "
                f"{dmabuf}")[:MAX_TEXT]
    return "no /GDRDMA on NCCL's network channels (NCCL did not log why: add NET to NCCL_DEBUG_SUBSYS)"


def network_reason(account: NcclAccount) -> str:
    """NCCL's reason, from its own lines, that a process ended on Socket; "" when it is not on Socket."""
    if account.network != "Socket":
        return ""
    reasons = []
    env = dict(line.split("=", 1) for line in account.env_lines if "=" in line)
    if env.get("NCCL_IB_DISABLE", "0") not in ("0", ""):
        reasons.append(f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']} set by environment")
    if env.get("NCCL_NET"):
        reasons.append(f"NCCL_NET={env['NCCL_NET']} set by environment")
    if account.ib_found is False:
        hca = f" (NCCL_IB_HCA={env['NCCL_IB_HCA']} matched no device)" if env.get("NCCL_IB_HCA") else \
            " (no /dev/infiniband in the container, or the RDMA driver not loaded)"
        reasons.append("NET/IB : No device found." + hca)
    if not reasons and account.plugin.why and not account.plugin.loaded:
        reasons.append(account.plugin.why)  # a missing plugin is the usual case: the reason only when nothing else is
    return "; ".join(reasons) or "NCCL's log does not say why IB was not used"
