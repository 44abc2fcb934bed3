"""From findings to exit code and bad hosts."""

from __future__ import annotations

from preflight.model import ExitCode, Finding, Severity
from preflight.steps.verdict import bad_hosts, decide_exit_code, verdict_text


def f(severity: Severity, hosts=(), blames_host: bool = False) -> Finding:
    return Finding("X001", severity, "m", "h", [], list(hosts), blames_host=blames_host)


def test_exit_codes() -> None:
    assert decide_exit_code([], strict=False) == ExitCode.PASSED
    assert decide_exit_code([f(Severity.WARN)], strict=False) == ExitCode.PASSED
    assert decide_exit_code([f(Severity.WARN)], strict=True) == ExitCode.WARNINGS_STRICT
    assert decide_exit_code([f(Severity.COULD_NOT_RUN)], strict=False) == ExitCode.INCOMPLETE
    assert decide_exit_code([f(Severity.COULD_NOT_RUN), f(Severity.ERROR)], strict=False) == ExitCode.FAILED
    assert decide_exit_code([], strict=False, interrupted=True) == ExitCode.INCOMPLETE
    assert verdict_text(ExitCode.PASSED, [f(Severity.WARN)]) == "passed with warnings"


def test_bad_hosts_are_partial_or_host_faults() -> None:
    hosts = ["n1", "n2", "n3"]
    assert bad_hosts([f(Severity.ERROR, ["n2"])], hosts) == ["n2"]
    assert bad_hosts([f(Severity.ERROR, hosts)], hosts) == []  # the job's config, not a node
    assert bad_hosts([f(Severity.ERROR, ["n1"], blames_host=True)], ["n1"]) == ["n1"]
    assert bad_hosts([f(Severity.WARN, ["n2"])], hosts) == []


def test_an_only_family_that_checked_nothing_is_could_not_run() -> None:
    """`--only gpu` without an NVIDIA driver: every gpu check skipped is RUN012, exit 4, never a pass."""
    from preflight.model import CheckOutcome
    from preflight.steps.verdict import families_unchecked

    skipped = [CheckOutcome(f"GPU00{i}", "gpu", "local", "t", Severity.SKIPPED, reason="no NVIDIA driver")
               for i in range(3)]
    [finding] = families_unchecked(skipped, ["gpu"])
    assert (finding.check_id, finding.severity) == ("RUN012", Severity.COULD_NOT_RUN)
    assert finding.message == "no NVIDIA driver: --only gpu checked nothing"
    assert decide_exit_code([finding], strict=False) == ExitCode.INCOMPLETE
    ran = [*skipped, CheckOutcome("GPU009", "gpu", "local", "t", Severity.OK)]
    assert families_unchecked(ran, ["gpu"]) == [] and families_unchecked(skipped, []) == []
