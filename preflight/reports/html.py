"""`--html PATH`: one self-contained file (inline SVG charts, styles and one small script; no network).

Every user-derived string reaches the page through Jinja2 with autoescape, or escaped once in
charts.py's SVG; the page's own script only ever sets `textContent`. Backticks in messages and
hints (`nvidia-smi -r`) become <code> after escaping (the `code` filter). A Content-Security-
Policy allows exactly the one inline script by hash and no network at all, as a second line of
defence.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
from msgspec import Struct, field

from preflight.lib.files import ensure_parent
from preflight.lib.grouping import hosts_by_row, numbers_by_row
from preflight.lib.hostlist import compress_hostlist, ranks_text
from preflight.model import JobReport, Severity
from preflight.reports import charts, device_table, fabric_table, host_choice, nccl_table, storage_table
from preflight.reports.common import (
    SEVERITY_LABEL,
    authentication_text,
    backend_text,
    check_summary,
    exclude_text,
    hostlist_text,
    ordered_findings,
    rank_ranges,
    where,
    world_summary,
)
from preflight.reports.drift_table import env_drift
from preflight.reports.probe_dims import expected_busbw, probe_dimensions

_TEMPLATES = Path(__file__).parent / "templates"
_VERDICT_CLASS = {"passed": "passed", "passed with warnings": "warned", "failed": "failed"}


class Todo(Struct):
    """One deduplicated hint: what to do, for which checks, where."""

    severity: Severity
    hint: str
    check_ids: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)

    @property
    def where(self) -> str:
        """Ranks and hosts the hint applies to."""
        parts = [ranks_text(self.ranks)] if self.ranks else []
        if self.hosts:
            parts.append(f"on {compress_hostlist(self.hosts)}")
        return " ".join(parts)


def what_to_do(report: JobReport) -> list[Todo]:
    """Hints of error (then could-not-run, then warning) findings, deduplicated, in the findings'
    one order (culprit first: model.culprit_order), so item 1 is what the culprit's own finding says.
    """
    todos: dict[str, Todo] = {}
    wanted = (Severity.ERROR, Severity.COULD_NOT_RUN, Severity.WARN)
    for finding in ordered_findings(report):
        if finding.severity not in wanted or not finding.hint:
            continue
        todo = todos.setdefault(finding.hint, Todo(finding.severity, finding.hint))
        if finding.check_id not in todo.check_ids:
            todo.check_ids.append(finding.check_id)
        todo.ranks.update(finding.ranks)
        todo.hosts.update(finding.hosts)
    return list(todos.values())


def _verdict_class(report: JobReport) -> str:
    return _VERDICT_CLASS.get(report.verdict, "failed" if report.exit_code == 3 else "incomplete")


def _finding_rows(report: JobReport, rank_hosts: dict[int, str]) -> list[dict[str, Any]]:
    rows = []
    for finding in ordered_findings(report):
        hosts = charts.finding_hosts(finding, rank_hosts)
        rows.append({
            "severity": finding.severity.value, "label": SEVERITY_LABEL[finding.severity],
            "check_id": finding.check_id, "message": finding.message, "where": where(finding),
            "hint": finding.hint, "hosts": hosts,
        })
    return rows


def _meta_rows(report: JobReport) -> list[tuple[str, str]]:
    meta = report.meta
    rows = [
        ("launcher", meta.launcher), ("job id", meta.job_id), ("run id", meta.run_id),
        ("world", f"{meta.world_size} rank(s) on {meta.num_nodes} node(s); {len(report.ranks)} reported"),
        ("hosts", hostlist_text(report.ranks)), ("master", f"{meta.master_addr}:{meta.master_port}"),
        ("mesh", meta.mesh or "(none)"), ("backend", backend_text(report)),
        ("authenticated", authentication_text(report)),
        ("started", meta.started_at), ("finished", meta.finished_at), ("duration", f"{meta.duration_s:.2f} s"),
        ("phases", ", ".join(f"{name} {seconds:.3f} s" for name, seconds in meta.phases.items())),
        ("command line", meta.command_line),
    ]
    if meta.restart_count:
        rows.append(("restart", str(meta.restart_count)))
    rows += [(f"version: {name}", value) for name, value in sorted(meta.versions.items())]
    return rows


def _dimensions(report: JobReport) -> list[dict[str, Any]]:
    """Per mesh dimension, its two charts (inline SVG) and what the heading says about it."""
    expected = expected_busbw(report)
    dims = []
    for dim, results in probe_dimensions(report).items():
        ops = sorted({r.op for r in results})
        dims.append({"dim": dim, "groups": len({r.group_index for r in results}), "ops": ops,
                     "legend": charts.op_legend(ops), "expected": expected.get(dim),
                     "unverified": sum(1 for r in results if not r.verified),
                     "sizes_svg": charts.busbw_by_size_svg(dim, results),
                     "groups_svg": charts.groups_svg(dim, results, expected.get(dim))})
    return dims


_BACKTICKS = re.compile(r"`([^`\n]{1,200})`")


def inline_code(text: str) -> markupsafe.Markup:
    """Escape text, then show `backticked` spans as <code>: the only markdown messages use."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(_BACKTICKS.sub(r"<code>\1</code>", escaped))


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # autoescape=True for every template: nothing user-derived is ever inserted raw.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["code"] = inline_code
    return env


def _csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def render(report: JobReport) -> str:
    """The whole report as one HTML document."""
    env = _environment()
    rank_hosts = dict(zip(numbers_by_row(report.ranks), hosts_by_row(report.ranks)))
    dims = _dimensions(report)
    rows = _finding_rows(report, rank_hosts)
    page_js = (_TEMPLATES / "report.js").read_text()
    return env.get_template("report.html.j2").render(
        report=report,
        verdict_class=_verdict_class(report),
        world=world_summary(report),
        todos=what_to_do(report),
        exclude=exclude_text(report),
        kept_nodelist=host_choice.nodelist(report.host_choice) if report.host_choice else "",
        missing=rank_ranges(report.missing_ranks, limit=50),
        rows=rows,
        filter_checks=sorted({row["check_id"] for row in rows}),
        filter_hosts=sorted({host for row in rows for host in row["hosts"]}),
        severities=[(s.value, SEVERITY_LABEL[s]) for s in sorted(Severity, key=lambda s: -s.rank)],
        colours={s.value: c for s, c in charts.SEVERITY_COLOUR.items()},
        severity_labels=SEVERITY_LABEL,
        drift=env_drift(report),
        meta_rows=_meta_rows(report),
        dims=dims,
        matrix=charts.matrix(report, rank_hosts),
        check_summary=check_summary(report),
        device_grids=device_table.grids(report),
        fabric_headers=fabric_table.HEADERS,
        fabric_rows=fabric_table.rows(report),
        nccl_dim_headers=nccl_table.DIM_HEADERS,
        nccl_dim_rows=nccl_table.dim_rows(report),
        nccl_headers=nccl_table.HEADERS,
        nccl_rows=nccl_table.rows(report),
        nccl_summary=nccl_table.summary_line(report),
        storage_headers=storage_table.HEADERS,
        storage_rows=storage_table.rows(report),
        storage_summary=storage_table.summary_line(report),
        page_js=page_js,
        csp_scripts=_csp_hash(page_js),
    )


def write(report: JobReport, path: str) -> None:
    """Write the HTML report to path, creating parent folders."""
    target = Path(path)
    ensure_parent(target)
    target.write_text(render(report), encoding="utf-8")
