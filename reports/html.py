"""`--html PATH`: one self-contained file (plotly.js, styles and scripts inline; no network).

Every user-derived string reaches the page through Jinja2 with autoescape, or as JSON
inside a `<script type="application/json">` block (`tojson` escapes `<`, `>`, `&`); the
page's own script only ever sets `textContent`. A Content-Security-Policy allows exactly
the two inline scripts by hash and no network at all, as a second line of defence.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from preflight.lib.hostlist import compress_hostlist
from preflight.model import JobReport, Severity
from preflight.reports import charts, host_choice
from preflight.reports.common import SEVERITY_LABEL, exclude_text, ordered_findings, rank_ranges, where, world_summary
from preflight.reports.drift_table import env_drift
from preflight.reports.probe_dims import expected_busbw, probe_dimensions

_TEMPLATES = Path(__file__).parent / "templates"
_VERDICT_CLASS = {"passed": "passed", "passed with warnings": "warned", "failed": "failed"}


@dataclass
class Todo:
    """One deduplicated hint: what to do, for which checks, where."""

    severity: Severity
    hint: str
    check_ids: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)

    @property
    def where(self) -> str:
        """Ranks and hosts the hint applies to."""
        parts = [f"ranks {rank_ranges(self.ranks)}"] if self.ranks else []
        if self.hosts:
            parts.append(f"on {compress_hostlist(self.hosts)}")
        return " ".join(parts)


def what_to_do(report: JobReport) -> list[Todo]:
    """Hints of error (then could-not-run, then warning) findings, deduplicated, most important first.

    Within a severity, the hint that concerns the most ranks comes first: it blocks the most.
    """
    todos: dict[str, Todo] = {}
    wanted = (Severity.ERROR, Severity.COULD_NOT_RUN, Severity.WARN)
    for finding in report.findings:
        if finding.severity not in wanted or not finding.hint:
            continue
        todo = todos.setdefault(finding.hint, Todo(finding.severity, finding.hint))
        if finding.severity.rank > todo.severity.rank:
            todo.severity = finding.severity
        if finding.check_id not in todo.check_ids:
            todo.check_ids.append(finding.check_id)
        todo.ranks.update(finding.ranks)
        todo.hosts.update(finding.hosts)
    return sorted(todos.values(), key=lambda t: (-t.severity.rank, -len(t.ranks) - len(t.hosts), t.check_ids))


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
    hosts = sorted({r.host for r in report.ranks})
    rows = [
        ("launcher", meta.launcher), ("job id", meta.job_id), ("run id", meta.run_id),
        ("world", f"{meta.world_size} rank(s) on {meta.num_nodes} node(s); {len(report.ranks)} reported"),
        ("hosts", compress_hostlist(hosts)), ("master", f"{meta.master_addr}:{meta.master_port}"),
        ("mesh", meta.mesh or "(none)"), ("backend", meta.backend),
        ("started", meta.started_at), ("finished", meta.finished_at), ("duration", f"{meta.duration_s:.2f} s"),
        ("phases", ", ".join(f"{name} {seconds:.3f} s" for name, seconds in meta.phases.items())),
        ("command line", meta.command_line),
    ]
    if meta.restart_count:
        rows.append(("restart", str(meta.restart_count)))
    rows += [(f"version: {name}", value) for name, value in sorted(meta.versions.items())]
    return rows


def _figures(report: JobReport, rank_hosts: dict[int, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(all figures for the page script, per-dimension sections for the template)."""
    figures: list[dict[str, Any]] = []
    matrix = charts.matrix_figure(report, rank_hosts)
    if matrix:
        figures.append({"id": "pf-matrix", **matrix})
    expected = expected_busbw(report)
    dims = []
    for index, (dim, results) in enumerate(probe_dimensions(report).items()):
        line_id, groups_id = f"pf-dim{index}-sizes", f"pf-dim{index}-groups"
        figures.append({"id": line_id, **charts.busbw_by_size_figure(dim, results)})
        figures.append({"id": groups_id, **charts.groups_figure(dim, results, expected.get(dim))})
        groups = {r.group_index for r in results}
        dims.append({"dim": dim, "line_id": line_id, "groups_id": groups_id, "groups": len(groups),
                     "ops": sorted({r.op for r in results}), "expected": expected.get(dim),
                     "unverified": sum(1 for r in results if not r.verified)})
    return figures, dims


@functools.lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # autoescape=True for every template: nothing user-derived is ever inserted raw.
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def render(report: JobReport) -> str:
    """The whole report as one HTML document."""
    env = _environment()
    rank_hosts = {facts.rank: facts.host for facts in report.ranks}
    figures, dims = _figures(report, rank_hosts)
    rows = _finding_rows(report, rank_hosts)
    page_js = (_TEMPLATES / "report.js").read_text()
    plotly_js = _plotly_js()
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
        has_matrix=any(f["id"] == "pf-matrix" for f in figures),
        figures=figures,
        checks_ran=len(report.checks),
        plotly_js=plotly_js,
        page_js=page_js,
        csp_scripts=f"{_csp_hash(plotly_js)} {_csp_hash(page_js)}",
    )


def write(report: JobReport, path: str) -> None:
    """Write the HTML report to path, creating parent folders."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(report), encoding="utf-8")
