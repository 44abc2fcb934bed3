"""The NVLink fabric table (reports/fabric_table.py): every domain in the HTML, a bounded table in the
text and terminal with the domains that need a look kept, and one computation for the three."""

from __future__ import annotations

import io

import pytest

from preflight.model import GpuHealth, HealthFacts, JobReport
from preflight.model.health_facts import GpuFabric
from preflight.reports import fabric_table, html, terminal, text
from tests.helpers.facts import built_report, cluster

PER_HOST = 2
DOMAINS = fabric_table.MAX_DOMAINS + 8


def _report(faulty: str = "", lacking_imex: str = "") -> JobReport:
    """DOMAINS domains of 2 hosts x 2 ranks (the first one of 3 hosts: the largest); the host named by
    `faulty` has a GPU reporting degraded bandwidth, the one by `lacking_imex` no IMEX channel."""
    ranks = cluster(DOMAINS * 2 + 1, PER_HOST)
    for facts in ranks:
        host_index = int(facts.host[4:]) - 1
        domain = max(0, host_index - 1) // 2  # hosts 1-3 in domain 0, then two a domain
        gpu = GpuHealth(index=facts.rank % PER_HOST, fabric=GpuFabric(
            state=3, cluster_uuid=f"{domain:08x}", clique_id=1, health_mask=1 if facts.host == faulty else 0))
        facts.health = HealthFacts(nvml="ok", gpus=[gpu], imex_channels=[] if facts.host == lacking_imex
                                   else ["channel0"])
    return built_report(ranks)


def _domain_rows(rendered: str) -> list[str]:
    """The domains a text or terminal table shows (their first column), in order."""
    return [line.split()[0].strip("│┃ ") for line in rendered.splitlines()
            if line.strip("│┃ ")[:8].isalnum() and "/1" in line.split()[0]]


def test_the_html_lists_every_domain_and_the_text_a_bounded_table_with_one_line_for_the_rest() -> None:
    report = _report()
    assert len(fabric_table.rows(report)) == DOMAINS
    page = html.render(report)
    assert all(f"{domain:08x}/1" in page for domain in range(DOMAINS))
    plain = text.render(report)
    shown = _domain_rows(plain)
    assert shown == [f"{domain:08x}/1" for domain in range(fabric_table.MAX_DOMAINS)]  # the largest first
    assert "... and 8 more healthy NVLink domain(s) (32 GPU(s)); see the HTML or JSON report" in plain
    out = io.StringIO()
    terminal.render(report, out)
    assert "... and 8 more healthy NVLink domain(s) (32 GPU(s))" in out.getvalue()


@pytest.mark.parametrize("kind", ["faulty", "lacking_imex"])
def test_a_domain_that_needs_a_look_is_shown_however_small(kind: str) -> None:
    last_host = f"node{DOMAINS * 2 + 1:03d}"  # in the last (smallest, last-sorted) domain
    report = _report(**{kind: last_host})
    last = f"{DOMAINS - 1:08x}/1"
    plain = text.render(report)
    assert _domain_rows(plain)[0] == last and len(_domain_rows(plain)) == fabric_table.MAX_DOMAINS
    assert "... and 8 more healthy NVLink domain(s) (32 GPU(s))" in plain  # what is left out is healthy
    column, says = {"faulty": (3, "degraded bandwidth on 2 GPU(s)"),  # the host's two ranks' GPUs
                    "lacking_imex": (4, f"1 of 2 host(s); none on {last_host}")}[kind]
    assert fabric_table.shown_rows(report)[0][column] == says
    out = io.StringIO()
    terminal.render(report, out)
    assert last in out.getvalue()


def test_a_few_domains_are_all_shown_without_a_line_under_them() -> None:
    ranks = cluster(4, PER_HOST)
    for facts in ranks:
        gpu = GpuHealth(index=0, fabric=GpuFabric(state=3, cluster_uuid=facts.host, clique_id=1))
        facts.health = HealthFacts(nvml="ok", gpus=[gpu], imex_channels=["channel0"])
    report = built_report(ranks)
    assert len(fabric_table.shown_rows(report)) == 4 and fabric_table.hidden_line(report) == ""
    assert "more healthy NVLink domain" not in text.render(report)


def test_the_text_terminal_and_html_of_one_report_read_its_domains_once(monkeypatch) -> None:
    report = _report()
    calls = []
    real = fabric_table._health
    monkeypatch.setattr(fabric_table, "_health", lambda sections: calls.append(1) or real(sections))
    fabric_table._domains.forget()
    text.render(report)
    terminal.render(report, io.StringIO())
    html.render(report)
    assert len(calls) == DOMAINS  # once per domain, not once per domain and renderer (3x at 131,072 ranks: 2.4 s)
