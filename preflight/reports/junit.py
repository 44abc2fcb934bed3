"""`--junit PATH`: one testcase per check id, so CI systems show preflight results natively.

The testcases are the same set on every run of the same options (the report lists every
selected check, engine checks included: steps/verdict.build_report), each named `ID: title`,
so CI trend tools never see tests appear and vanish. A check with an error finding is a
failure; one that did not apply here (a GPU check without an NVIDIA driver) or could not run
is skipped, with the reason as the message; anything else passes; warnings and infos go to
the testcase's system-out. The failure's message is the specific finding, culprit first
(`rank 3 on node04: ...`): it is what a CI page shows first; the hint is in the body.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from preflight.lib.files import ensure_parent
from preflight.model import CheckOutcome, Finding, JobReport, Severity
from preflight.reports.common import SEVERITY_LABEL, culprits_first, where


def _describe(findings: list[Finding]) -> str:
    return "\n".join(
        f"[{SEVERITY_LABEL[f.severity]}] {f.message}" + (f" ({where(f)})" if where(f) else "") for f in findings
    )


def _specific(finding: Finding) -> str:
    """`rank 3 on node04: rank 3 is in slow groups ...`: who, then what (the figure is in the message)."""
    place = where(finding)
    return f"{place}: {finding.message}" if place else finding.message


def _classname(check_id: str, outcome: CheckOutcome | None) -> str:
    tag = outcome.tag if outcome else check_id.rstrip("0123456789").lower()
    return f"preflight.{tag}"


def build(report: JobReport) -> ET.ElementTree:
    """The JUnit XML tree of a report."""
    outcomes = {o.check_id: o for o in report.checks}
    by_check: dict[str, list[Finding]] = defaultdict(list)
    for finding in report.findings:
        by_check[finding.check_id].append(finding)
    check_ids = sorted(set(outcomes) | set(by_check))
    suite = ET.Element("testsuite", name="preflight", timestamp=report.meta.started_at,
                       time=f"{report.meta.duration_s:.3f}", hostname=report.meta.master_addr)
    properties = ET.SubElement(suite, "properties")
    for name, value in (("verdict", report.verdict), ("exit_code", str(report.exit_code)), ("why", report.why),
                        ("launcher", report.meta.launcher), ("job_id", report.meta.job_id),
                        ("world_size", str(report.meta.world_size)), ("mesh", report.meta.mesh),
                        ("bad_hosts", ",".join(report.bad_hosts))):
        ET.SubElement(properties, "property", name=name, value=value)
    failures = skipped = 0
    for check_id in check_ids:
        outcome, found = outcomes.get(check_id), by_check.get(check_id, [])
        title = f"{check_id}: {outcome.title}" if outcome else check_id
        case = ET.SubElement(suite, "testcase", classname=_classname(check_id, outcome), name=title,
                             time=f"{outcome.duration_s if outcome else 0.0:.3f}")
        errors = culprits_first([f for f in found if f.severity == Severity.ERROR])
        not_run = culprits_first([f for f in found if f.severity == Severity.COULD_NOT_RUN])
        if errors:
            failures += 1
            failure = ET.SubElement(case, "failure", message=_specific(errors[0]), type="error")
            failure.text = _describe(errors + not_run) + "\n" + "\n".join(sorted({f.hint for f in errors if f.hint}))
        elif not_run or (outcome and outcome.status == Severity.COULD_NOT_RUN):
            skipped += 1
            message = _specific(not_run[0]) if not_run else "could not run"
            skip = ET.SubElement(case, "skipped", message=message)
            skip.text = _describe(not_run) + "\n" + "\n".join(sorted({f.hint for f in not_run if f.hint}))
        elif outcome and outcome.status == Severity.SKIPPED:
            skipped += 1
            ET.SubElement(case, "skipped", message=f"did not apply: {outcome.reason or 'not applicable here'}")
        rest = [f for f in found if f.severity in (Severity.WARN, Severity.INFO)]
        if rest:
            ET.SubElement(case, "system-out").text = _describe(rest) + "\n" + "\n".join(
                sorted({f.hint for f in rest if f.hint}))
    suite.set("tests", str(len(check_ids)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="preflight", tests=str(len(check_ids)), failures=str(failures),
                      errors="0", skipped=str(skipped), time=f"{report.meta.duration_s:.3f}")
    root.append(suite)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return tree


def render(report: JobReport) -> str:
    """The JUnit XML as a string."""
    return ET.tostring(build(report).getroot(), encoding="unicode", xml_declaration=True) + "\n"


def write(report: JobReport, path: str) -> None:
    """Write the JUnit XML to path."""
    target = Path(path)
    ensure_parent(target)
    target.write_text(render(report), encoding="utf-8")
