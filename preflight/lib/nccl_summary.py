"""Fold per-rank NcclAccounts into per-host accounts, host profiles and per-dimension transports.

One owner for "what NCCL said, per host and per mesh dimension": the run's report (`summarize`,
called by probes/orchestrate.py on rank 0), `preflight nccl-log` and the transport named in the
slow-group findings (`group_transport`, steps/nccl_account.py) all read it from here.
"""

from __future__ import annotations

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


def host_account(host: str, ranks: Sequence[int], distinct: Mapping[int, NcclAccount],
                 folded: dict[tuple[int, ...], NcclHostAccount] | None = None) -> NcclHostAccount:
    """One host's ranks folded into one account from its distinct account objects (by id: ranks share
    them), each read once.

    folded: hosts already folded, by their distinct accounts: a host whose ranks said what another
    host's said reuses that fold, its own name and ranks put in."""
    ranks = sorted(rank for rank in ranks if rank >= 0)
    key = tuple(distinct)
    if folded is not None and key in folded:
        done = folded[key]
        return NcclHostAccount(host, ranks, done.nccl_version, done.network, done.gdr, done.plugin, done.nics,
                               done.intra, done.inter, done.reason, done.warnings)
    accounts = list(distinct.values())
    gdrs = [a.gdr for a in accounts if a.gdr is not None]
    nics = sorted({f"{n.device}:{n.port}/{n.link_layer}" if n.port is not None else n.device
                   for a in accounts for n in a.nics})
    reasons = [network_reason(a) or a.gdr_reason for a in accounts]
    warnings: list[str] = []
    for account in accounts:
        for text in account.warnings:
            if len(warnings) < MAX_HOST_WARNINGS and text not in warnings:
                warnings.append(text)
    account = NcclHostAccount(
        host=host, ranks=ranks,
        nccl_version=_joined(a.nccl_version for a in accounts), network=_joined(a.network for a in accounts),
        gdr=(all(gdrs) if gdrs else None), plugin=_joined(a.plugin.name for a in accounts if a.plugin.loaded),
        nics=nics[:16], intra=sorted({c for a in accounts for c in a.intra_transports()}),
        inter=sorted({c for a in accounts for c in a.network_transports()}),
        reason=next((r for r in reasons if r), ""), warnings=warnings)
    if folded is not None:
        folded[key] = account
    return account


def _host(rank: int, accounts: Mapping[int, NcclAccount], hosts: Mapping[int, str]) -> str:
    return hosts.get(rank) or accounts[rank].host


Grouped = dict[str, tuple[list[int], dict[int, NcclAccount]]]
# by_host's last answer in rank order, for the same accounts and hosts (the same objects, the same
# sizes): the report's summary and the checks (NcclJob) group the same job's accounts, 131,072 on
# rank 0. Read-only to its callers.
_LAST: list[tuple[Mapping[int, NcclAccount], Mapping[int, str] | None, int, int, Grouped]] = []


def by_host(accounts: Mapping[int, NcclAccount], hosts: Mapping[int, str] | None = None,
            order: Iterable[int] | None = None) -> Grouped:
    """Per host (rank -> host from `hosts`, else the account's own): its ranks and its distinct account
    objects (by id: ranks share them), hosts in the order they first appear among `order` (default:
    rank order). One pass and no object per rank: rank 0 does it for every rank of the job (131,072).
    In rank order the last answer is kept for the same `accounts` and `hosts` (read-only)."""
    if order is None:
        sizes = (len(accounts), len(hosts) if hosts is not None else -1)
        for kept in _LAST:
            if kept[0] is accounts and kept[1] is hosts and kept[2:4] == sizes:
                return kept[4]
        grouped = _by_host(accounts, hosts, None)
        _LAST[:] = [(accounts, hosts, *sizes, grouped)]
        return grouped
    return _by_host(accounts, hosts, order)


def forget_grouping() -> None:
    """Drop by_host's kept answer (its last user, the checks of steps/nccl_account.judge, is done:
    at 131,072 ranks it is ~16 MB that would otherwise live to the end of the run)."""
    _LAST.clear()


def _by_host(accounts: Mapping[int, NcclAccount], hosts: Mapping[int, str] | None,
             order: Iterable[int] | None) -> Grouped:
    host_of = (hosts or {}).get
    grouped: Grouped = {}
    for rank in sorted(accounts) if order is None else order:
        account = accounts[rank]
        host = host_of(rank) or account.host
        members = grouped.get(host)
        if members is None:
            grouped[host] = ([rank], {id(account): account})
        else:
            members[0].append(rank)
            members[1][id(account)] = account
    return grouped


def host_accounts(accounts: Mapping[int, NcclAccount], hosts: Mapping[int, str] | None = None,
                  order: Sequence[int] | None = None) -> list[NcclHostAccount]:
    """Per host (rank -> host from `hosts`, else the account's own), in the order hosts first appear
    among `order` (default: rank order)."""
    folded: dict[tuple[int, ...], NcclHostAccount] = {}
    return [host_account(host, ranks, distinct, folded)
            for host, (ranks, distinct) in by_host(accounts, hosts, order).items()]


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


def _per_host(ranks: Sequence[int], accounts: Mapping[int, NcclAccount],
              hosts: Mapping[int, str]) -> dict[str, dict[int, NcclAccount]]:
    """A group's distinct accounts (by object) per host."""
    host_of = hosts.get
    per_host: dict[str, dict[int, NcclAccount]] = {}
    for rank in ranks:
        account = accounts.get(rank)
        if account is not None:
            host = host_of(rank) or account.host
            members = per_host.get(host)
            if members is None:
                per_host[host] = {id(account): account}
            else:
                members[id(account)] = account
    return per_host


def group_transport(ranks: Sequence[int], accounts: Mapping[int, NcclAccount],
                    hosts: Mapping[int, str] | None = None, said: dict[tuple[int, ...], str] | None = None) -> str:
    """What carried one group, in NCCL's words: `P2P/CUMEM`, `NET/IB/GDRDMA`, `NET/Socket on host b`; "" unknown.

    A group on one host used its intra-host transports; one across hosts used each member's
    network transport (named per host where the hosts differ)."""
    return _described(_per_host(ranks, accounts, hosts or {}), said)


def _described(per_host: dict[str, dict[int, NcclAccount]], said: dict[tuple[int, ...], str] | None) -> str:
    """group_transport's words for a group's accounts per host."""
    if not per_host:
        return ""
    if len(per_host) == 1:  # within one host: its accounts' own transports (said: cached by those accounts)
        (members,) = per_host.values()
        key = tuple(members)
        if said is not None and key in said:
            return said[key]
        text = _joined(c for a in members.values() for c in a.intra_transports()) or _joined(
            c for a in members.values() for c in a.network_transports())
        if said is not None:
            said[key] = text
        return text
    kinds: dict[str, list[str]] = {}
    for host, members in per_host.items():
        names = {c for a in members.values() for c in (a.network_transports() or
                                                        ([f"NET/{a.network}"] if a.network else []))}
        kinds.setdefault(", ".join(sorted(names)) or "?", []).append(host)
    if len(kinds) == 1:
        return next(iter(kinds))
    common = max(kinds, key=lambda k: len(kinds[k]))
    odd = "; ".join(f"{name} on host {', '.join(sorted(h)[:3])}" for name, h in kinds.items() if name != common)
    return f"{common}; {odd}"


def dimensions(groups: Mapping[str, Sequence[Sequence[int]]], accounts: Mapping[int, NcclAccount],
               hosts: Mapping[int, str] | None = None) -> list[NcclDimension]:
    """Each mesh dimension's transports over its groups (the distinct descriptions, most groups first)."""
    grouped = by_host(accounts, hosts)  # the summary's own grouping (kept): a group that is a host's ranks, or
    every: list[int] | None = None  # every rank's, is read from it, not grouped again
    hosts = hosts or {}
    out = []
    said: dict[tuple[int, ...], str] = {}
    for dim, dim_groups in groups.items():
        seen: dict[str, int] = {}
        intra = 0
        for ranks in dim_groups:
            per_host = None
            if len(ranks) >= len(accounts):
                every = sorted(accounts) if every is None else every
                if list(filter(accounts.__contains__, ranks)) == every:  # every rank with an account, in order
                    per_host = {host: distinct for host, (_, distinct) in grouped.items()}
            elif ranks and (account := accounts.get(ranks[0])) is not None:
                host = hosts.get(ranks[0]) or account.host
                members = grouped.get(host)
                if members is not None and members[0] == list(ranks):  # exactly one host's ranks
                    per_host = {host: members[1]}
            if per_host is None:
                per_host = _per_host(ranks, accounts, hosts)  # one pass over the group for both
            intra += len(per_host) == 1
            text = _described(per_host, said)
            if text:
                seen[text] = seen.get(text, 0) + 1
        described = [f"{text} ({count} group{'s' if count > 1 else ''})" if len(seen) > 1 else text
                     for text, count in sorted(seen.items(), key=lambda kv: -kv[1])][:8]
        out.append(NcclDimension(dim, len(dim_groups), intra, described))
    return out


def classes(names: Iterable[str]) -> list[str]:
    """Transport names as classes (see model.nccl_account.transport_class), sorted."""
    return sorted({transport_class(n) for n in names})


def summarize(accounts: Mapping[int, NcclAccount], unavailable: int, groups: Mapping[str, Sequence[Sequence[int]]],
              hosts: Mapping[int, str] | None = None) -> NcclSummary:
    """The report's NCCL section: host profiles and each dimension's transports."""
    sources = sorted({a.source for a in {id(a): a for a in accounts.values()}.values() if a.source})
    return NcclSummary(source=", ".join(sources), ranks_read=len(accounts), ranks_unavailable=unavailable,
                       profiles=profiles(host_accounts(accounts, hosts)), dims=dimensions(groups, accounts, hosts))
