"""The run against its history (--history): a figure below its own past, a flaky host, and a
history or metrics file that could not be used (which never changes the verdict)."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.numbers import json_number
from preflight.lib.units import human_bytes, percent
from preflight.model import Finding, Severity
from preflight.model.history_records import Drop, Flaky
from preflight.registry import Problem, Tags, engine_check


def drop_fraction(finding: Finding) -> float | None:
    """HIS002 (below_own_history): the figure as a fraction of its own past median, from the data it
    writes (None when the data has neither): the one reader of those keys (steps/host_choice.py)."""
    value, median = json_number(finding.data.get("value")), json_number(finding.data.get("median"))
    return value / median if value is not None and median else None


@engine_check(
    "HIS001",
    tag=Tags.HISTORY,
    severity=Severity.INFO,
    hint="The checks' findings are unaffected, but the run was not recorded: a run that passed exits 4 "
    "(incomplete), its headline starting NOT WRITTEN. Fix the history URL or file (permissions, disk, "
    "a newer preflight that wrote it); `preflight history --history URL` says the same in one line.",
)
def history_unusable(reason: str, url: str) -> Iterable[Problem]:
    """The history (--history / PREFLIGHT_HISTORY) could not be read or written.

    Unwritable, locked past the deadline, corrupt, not a preflight history, or of a newer
    schema: this run is not recorded (or not judged against its past), and a corrupt or newer
    database is never overwritten. Informational as a finding; the output not written makes a run
    that passed exit 4 with `NOT WRITTEN: --history ...` first in its headline (one rule for every
    output, preflight/reports/targets.py).
    """
    yield Problem(reason, data={"url": url})


@engine_check(
    "HIS002",
    tag=Tags.HISTORY,
    severity=Severity.WARN,
    hint="The host (or GPU) measures clearly below its own healthy runs, even if its siblings in this job "
    "do not stand out: compare with `preflight history --host HOST`; check its links (NVLink/IB rate, "
    "ibstat), clocks and throttling, traffic shaping; drain it if the drop stays.",
)
def below_own_history(drop: Drop) -> Iterable[Problem]:
    """A host's or GPU's figure is clearly below its own recent history.

    Per subject and comparable figure (same op, dimension, message size and group shape), at
    the largest size: named when below 0.75 x the 10th percentile of its last 30 healthy runs
    (at least 5). The p10 is the subject's own noise floor; a whole job slowed the same way
    passes the straggler rule, not this one. A host is named only when every figure of it the
    history can judge is below its past (one slow group shared with a slow host does not name
    a healthy one). The checkpoint path's write and read rates per host (--storage) are
    judged the same way, each on its own. Rules in docs/history.md.
    """
    row, past = drop.row, drop.past
    who = f"GPU {row.gpu_uuid} on {row.host}" if row.gpu_uuid else row.host
    what = f"{row.dim} {row.op} busbw" if row.kind == "collective" else f"{row.dim} {row.op}".strip()
    yield Problem(
        f"{who}: {what} {row.value:.3g} {row.unit} at {human_bytes(row.size_bytes)}, its last "
        f"{len(past.values)} runs' median {past.median:.3g} {row.unit} ({percent(row.value / past.median)}; "
        f"below {percent(1 - drop.margin)} of its p10 {past.p10:.3g})",
        hosts=[row.host] if row.host else [],
        data={"subject": row.subject, "kind": row.kind, "dim": row.dim, "op": row.op, "size_bytes": row.size_bytes,
              "value": row.value, "unit": row.unit, "median": past.median, "p10": past.p10,
              "threshold": drop.threshold, "runs": len(past.values), "gpu_uuid": row.gpu_uuid},
    )


@engine_check(
    "HIS003",
    tag=Tags.HISTORY,
    severity=Severity.WARN,
    hint="The host fails often even if it passed now: `preflight history exclude --flaky --exclude-file F` "
    "writes the flaky hosts for sbatch --exclude before the next job; look at its past findings with "
    "`preflight history --host HOST`.",
)
def flaky_host(flaky: Flaky, failures: int, window: int) -> Iterable[Problem]:
    """A host failed (was on the exclude list) in at least K of its last N recorded runs (--flaky K/N).

    Named even when this run passed on it: an intermittent node passes sometimes.
    """
    yield Problem(f"host {flaky.host} failed {flaky.failed} of its last {flaky.runs} recorded runs "
                  f"(flaky: {failures} of {window})", hosts=[flaky.host],
                  data={"failed": flaky.failed, "runs": flaky.runs, "run_ids": flaky.run_ids[:20]})


@engine_check(
    "HIS004",
    tag=Tags.HISTORY,
    severity=Severity.INFO,
    hint="A run that passed exits 4 (incomplete: an output asked for was not written). Check the --metrics "
    "folder (node_exporter's --collector.textfile.directory): it must exist and be writable.",
)
def metrics_not_written(path: str, reason: str) -> Iterable[Problem]:
    """The --metrics file could not be written after the verdict; a run that passed then exits 4
    with `NOT WRITTEN: --metrics PATH` first in its headline (preflight/reports/targets.py)."""
    yield Problem(f"metrics file {path} not written: {reason}", data={"path": path})
