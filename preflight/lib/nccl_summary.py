"""Fold per-rank NcclAccounts into per-host accounts, host profiles and per-dimension transports.

One owner for "what NCCL said, per host and per mesh dimension": the run's report (`summarize`,
called by probes/orchestrate.py on rank 0), `preflight nccl-log` and the transport named in the
slow-group findings (`group_transport`, steps/nccl_account.py) all read it from here.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence

from preflight.lib.nccl_log import network_reason
from preflight.model.nccl_account import (
    NcclAccount,
    NcclDimension,
    NcclHostAccount,
    NcclProfile,
    NcclSummary,
    transport_class,
)

MAX_HOST_WARNINGS = 4


def _joined(values: Iterable[str]) -> str:
    return ", ".join(sorted({v for v in values if v}))


def host_account(host: str, accounts: Sequence[NcclAccount]) -> NcclHostAccount:
    """One host's ranks folded into one account."""
    gdrs = [a.gdr for a in accounts if a.gdr is not None]
    plugin = _joined(a.plugin.name for a in accounts if a.plugin.loaded)
    distinct = {id(a.nics): a.nics for a in accounts}  # lists ranks share (own_accounts) are read once
    nics = sorted({f"{n.device}:{n.port}/{n.link_layer}" if n.port is not None else n.device
                   for listed in distinct.values() for n in listed})
    reasons = [network_reason(a) or a.gdr_reason for a in accounts]
    warnings: list[str] = []
    for account in accounts:
        for text in account.warnings:
            if len(warnings) < MAX_HOST_WARNINGS and text not in warnings:
                warnings.append(text)
    return NcclHostAccount(
        host=host, ranks=sorted(a.rank for a in accounts if a.rank is not None),
        nccl_version=_joined(a.nccl_version for a in accounts), network=_joined(a.network for a in accounts),
        gdr=(all(gdrs) if gdrs else None), plugin=plugin, nics=nics[:16],
        intra=sorted({c for a in accounts for c in a.intra_transports()}),
        inter=sorted({c for a in accounts for c in a.network_transports()}),
        reason=next((r for r in reasons if r), ""), warnings=warnings)


_FIELDS = tuple(f.name for f in dataclasses.fields(NcclAccount))
_ALL_FIELDS = operator.attrgetter(*_FIELDS)
_RANK, _HOST = _FIELDS.index("rank"), _FIELDS.index("host")


def own_accounts(values: Sequence[object], ranks: Sequence[int], hosts: Mapping[int, str]) -> dict[int, NcclAccount]:
    """Rank -> its account, from values ranks sent alike (one decoded object per distinct value): each
    rank gets its own shallow copy naming its rank and host, sharing the rest (read-only). Built
    positionally: copy.copy of a 30-slot dataclass cost 5x more, 131,072 times."""
    out: dict[int, NcclAccount] = {}
    for rank, value in zip(ranks, values, strict=True):
        if isinstance(value, NcclAccount):
            fields = list(_ALL_FIELDS(value))
            fields[_RANK], fields[_HOST] = rank, hosts.get(rank, value.host)
            out[rank] = NcclAccount(*fields)
    return out


def host_accounts(accounts: Iterable[NcclAccount]) -> list[NcclHostAccount]:
    """Per host, in the order hosts first appear."""
    hosts: dict[str, list[NcclAccount]] = {}
    for account in accounts:
        hosts.setdefault(account.host, []).append(account)
    return [host_account(host, group) for host, group in hosts.items()]


def _shape(account: NcclHostAccount) -> tuple[object, ...]:
    return (account.nccl_version, account.network, account.gdr, account.plugin, tuple(account.intra),
            tuple(account.inter), account.reason, len(account.nics))


def profiles(hosts: Iterable[NcclHostAccount]) -> list[NcclProfile]:
    """Hosts that said the same, largest group first."""
    groups: dict[tuple[object, ...], NcclProfile] = {}
    for account in hosts:
        key = _shape(account)
        profile = groups.get(key)
        if profile is None:
            groups[key] = NcclProfile([account.host], len(account.ranks), account)
        else:
            profile.hosts.append(account.host)
            profile.ranks += len(account.ranks)
    return sorted(groups.values(), key=lambda p: -len(p.hosts))


def group_transport(ranks: Sequence[int], accounts: Mapping[int, NcclAccount]) -> str:
    """What carried one group, in NCCL's words: `P2P/CUMEM`, `NET/IB/GDRDMA`, `NET/Socket on host b`; "" unknown.

    A group on one host used its intra-host transports; one across hosts used each member's
    network transport (named per host where the hosts differ)."""
    members = [accounts[r] for r in ranks if r in accounts]
    if not members:
        return ""
    hosts = {a.host for a in members}
    if len(hosts) == 1:
        return _joined(c for a in members for c in a.intra_transports()) or _joined(
            c for a in members for c in a.network_transports())
    per_host: dict[str, set[str]] = {}
    for account in members:
        per_host.setdefault(account.host, set()).update(account.network_transports() or
                                                        ({f"NET/{account.network}"} if account.network else set()))
    kinds: dict[str, list[str]] = {}
    for host, names in per_host.items():
        kinds.setdefault(", ".join(sorted(names)) or "?", []).append(host)
    if len(kinds) == 1:
        return next(iter(kinds))
    common = max(kinds, key=lambda k: len(kinds[k]))
    odd = "; ".join(f"{name} on host {', '.join(sorted(h)[:3])}" for name, h in kinds.items() if name != common)
    return f"{common}; {odd}"


def dimensions(groups: Mapping[str, Sequence[Sequence[int]]],
               accounts: Mapping[int, NcclAccount]) -> list[NcclDimension]:
    """Each mesh dimension's transports over its groups (the distinct descriptions, most groups first)."""
    out = []
    for dim, dim_groups in groups.items():
        seen: dict[str, int] = {}
        intra = 0
        for ranks in dim_groups:
            hosts = {accounts[r].host for r in ranks if r in accounts}
            intra += len(hosts) == 1
            text = group_transport(ranks, accounts)
            if text:
                seen[text] = seen.get(text, 0) + 1
        described = [f"{text} ({count} group{'s' if count > 1 else ''})" if len(seen) > 1 else text
                     for text, count in sorted(seen.items(), key=lambda kv: -kv[1])][:8]
        out.append(NcclDimension(dim, len(dim_groups), intra, described))
    return out


def classes(names: Iterable[str]) -> list[str]:
    """Transport names as classes (see model.nccl_account.transport_class), sorted."""
    return sorted({transport_class(n) for n in names})


def summarize(accounts: Mapping[int, NcclAccount], unavailable: int,
              groups: Mapping[str, Sequence[Sequence[int]]]) -> NcclSummary:
    """The report's NCCL section: host profiles and each dimension's transports."""
    ordered = [accounts[r] for r in sorted(accounts)]
    sources = sorted({a.source for a in ordered if a.source})
    return NcclSummary(source=", ".join(sources), ranks_read=len(ordered), ranks_unavailable=unavailable,
                       profiles=profiles(host_accounts(ordered)), dims=dimensions(groups, accounts))
