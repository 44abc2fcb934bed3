"""Words the help, the reports and `preflight explain` use, each defined once: `preflight explain
TERM` prints one, `preflight explain glossary` all of them. It ships in the wheel (it is code),
so the help points here, never at a docs/ file a pip user does not have."""

from __future__ import annotations

import re

TERMS: dict[str, str] = {
    "busbw": "Bus bandwidth, in GB/s (1e9 bytes/s): a collective's data rate scaled as nccl-tests scales it, so "
             "all_reduce, all_gather and the rest compare with the link's own rate whatever the group size.",
    "could-not-run": "A severity: the check started but crashed or ran past --check-timeout, or what was asked "
                     "for measured nothing (RUN012), so it proves nothing. It is never a pass: the run is "
                     "incomplete (exit 4) unless something failed.",
    "engine": "A check's scope: raised by preflight's own steps from what they observed (a store that did not "
              "form, a rank that died, a probe that hung), not computed from facts. `preflight list` shows each "
              "check's scope: local (every rank, its own facts), cross (rank 0, every rank's facts), engine.",
    "expectations": "What a probe's busbw is compared with: --expect DIM=RATE when given, else the hardware "
                    "profile of the GPUs and links found (NVLink, InfiniBand), else the run's history (--history). "
                    "Below 0.9x of --expect: {BW007}. Below 0.9x of a hardware profile: {BW011}.",
    "flaky": "A host that failed in K of its last N recorded runs (--flaky K/N, default 3/10): "
             "`preflight history exclude --flaky` lists them, one per line.",
    "history": "--history URL (sqlite:///path/history.db or postgresql://user@host/db) records every run and "
               "judges each host's and GPU's figures against its own past; `preflight history` shows the runs, "
               "trends and flaky hosts. A history or --metrics file that cannot be written makes a run that "
               "passed exit 4, its headline starting NOT WRITTEN.",
    "known-good": "A rank or host the probes have measured at its siblings' speed: what a suspect is measured "
                  "against again, so a slow result follows the suspect, not its partner.",
    "level": "--level quick|standard|long: how much a run measures, each with a stated time budget, as DCGM's "
             "levels: {LEVELS}. Every level runs every check; an option given explicitly wins over its level.",
    "localize": "Finding which host or link makes a group slow (--localize): pairwise measures ranks two by two "
                "in a round robin; grouptest halves the suspect hosts each round, fewer rounds on many hosts; "
                "auto picks grouptest when the hosts are many and it can run.",
    "siblings": "The others of the same kind in the same run: the other groups of a mesh dimension measured at "
                "the same time, or the other devices of the same model. A figure is judged against its "
                "siblings' median, so no hardware number has to be known.",
    "straggler": "A group (or the rank in it) below --straggler-ratio x its siblings' median busbw, confirmed by a "
                 "second measurement: {BW003}. The rank in slow groups of two dimensions: {BW004}.",
    "nominal": "A link's rated speed, as the hardware reports it: NVLink's per-link rate times its active links "
               "(NVML), an InfiniBand port's rate (sysfs). The probe table's `of nominal` is the slowest group's "
               "busbw as a share of it, where it can be read; `none` on CPU or gloo. It is context, not a "
               "judgement: the expectations (`preflight explain expectations`) are what a finding compares with.",
    "severity": "How bad a finding is: info, warn, could-not-run or error (the worst first in every view). Each "
                "check states its rule (`preflight explain ID`: `Severity: ...`); some grade theirs ("
                "{BW003}). {FLAGS}.",
    "sustain": "--device-sustain SECONDS: after the device probes, that many seconds of continuous bf16 matrix "
               "work on each GPU while NVML (the driver's monitoring library) is read, to catch a GPU that "
               "throttles under long load. Without it NVML is read only in the pauses between the short timed "
               "runs of the device probes.",
}
TOPIC = "glossary"  # `preflight explain glossary`: every term


def lookup(word: str) -> str | None:
    """The definition of a term (case and `-`/`_`/space insensitive), or None."""
    key = word.strip().lower().replace("_", "-").replace(" ", "-")
    return quoted(TERMS[key]) if key in TERMS else None


def text() -> str:
    """Every term with its definition, as `preflight explain glossary` prints them."""
    return "\n\n".join(f"{term}\n  {quoted(definition)}" for term, definition in sorted(TERMS.items())) + "\n"


def quoted(definition: str) -> str:
    """A definition with each `{CHECK_ID}` replaced by that check's severity rule, as the check states it
    (registry.CheckSpec.severity_rule), `{FLAGS}` by what the exit code makes of a finding and `{LEVELS}`
    by the levels' table (probes/levels.py): the glossary quotes the one rule, never a copy of it."""
    from preflight.registry import SEVERITY_FLAGS, get_check, load_builtin_checks

    load_builtin_checks()

    def rule(match: re.Match[str]) -> str:
        if match.group(1) == "FLAGS":
            return SEVERITY_FLAGS[0].upper() + SEVERITY_FLAGS[1:]
        if match.group(1) == "LEVELS":
            from preflight.probes.levels import level_help

            return level_help()
        spec = get_check(match.group(1))
        return f"{spec.id} is {spec.severity_rule}" if spec else match.group(0)

    return re.sub(r"\{([A-Z]+[0-9]*)\}", rule, definition)
