"""The options of a run as one table: one row per option, as nccl-tests has one row per collective.

A row says everything about one option once: its name (preflight.check's keyword and argparse's
dest), its flag, whether the API takes it, its environment variable, its kind (how its text is
read and its value checked: options/kinds.py), its default, its help, its `--help` group and
whether every rank must agree on it. What is built from the table: argparse's run options
(commands/run_flags.py), `preflight.check`'s keywords, signature and docstring (api.py),
RunOptions' defaults and its per-field validation (options/run.py), the flag named in every
error message (`option_name`), the gang's agreement digest (options/agreement.py) and the
options list in docs/options.md (tests/test_options_table.py compares it).

Adding an option is adding a row here and its field in RunOptions or in one of its parts
(options/parts.py; docs/architecture.md, "The options table").
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from preflight.options.kinds import (
    COUNT,
    FLAG,
    NAMES,
    PATH,
    RATIO,
    RUN_ID,
    SECONDS,
    SECONDS_OR_NONE,
    SECONDS_OR_ZERO,
    TEXT,
    TEXT_OR_NONE,
    Kind,
    choice,
)
from preflight.options.values import BACKENDS, LOCALIZE, OPS
from preflight.probes.levels import DEFAULT_LEVEL, LEVELS, level_help

# argparse groups of `preflight run --help`, in order: name -> title.
GROUPS = {
    "run": "run",
    "reports": "reports (the terminal report is always printed unless --quiet)",
    "history": "history and metrics (`preflight explain history`)",
    "probes": "probes (collective bandwidth over every DeviceMesh dimension)",
    "device": "device probes (each device's compute and memory, in the probe step)",
    "storage": "storage (the checkpoint path)",
}


class Option(Struct, frozen=True):
    """One option of a run.

    name: preflight.check's keyword and argparse's dest. field: where the value lands in
    RunOptions (`timeouts.run_s`: the field of a part, options/parts.py; `reports.json`; None: the
    field of its own name; "" for text that RunOptions.build parses into the fields `sets` names).
    api: preflight.check takes it as a keyword. env: the environment variable read when it is not
    given. agree: every rank must be started with the same value
    (rank 0 compares them before any collective: options/agreement.py). internal: set by
    `launch` or tests, its help hidden.
    """

    name: str
    flag: str
    kind: Kind
    default: Any
    help: str
    group: str
    agree: bool = False
    api: bool = True
    env: str | None = None
    field: str | None = None  # None: the same as name
    sets: tuple[str, ...] = ()
    metavar: str | None = None
    internal: bool = False

    @property
    def target(self) -> str:
        """Where the value lands: a field of RunOptions or of a part (`timeouts.run_s`), or "" (text build parses)."""
        return self.name if self.field is None else self.field

    @property
    def fields(self) -> tuple[str, ...]:
        """The names (the last part of each dotted one) this option sets, as error messages name them."""
        return tuple(name.rpartition(".")[2] for name in ((self.target,) if self.target else self.sets))

    @property
    def roots(self) -> tuple[str, ...]:
        """The RunOptions fields this option sets (`storage` for `storage.path`)."""
        return tuple(name.partition(".")[0] for name in ((self.target,) if self.target else self.sets))

    def help_text(self, values: dict[str, str]) -> str:
        """The help with its computed parts (defaults from the probe plan, the tags) filled in."""
        return self.help.format(**values)


def _row(name: str, flag: str, kind: Kind, default: Any, group: str, help: str, **more: Any) -> Option:
    return Option(name=name, flag=flag, kind=kind, default=default, group=group, help=help, **more)


OPTIONS: tuple[Option, ...] = (
    # -- run --
    _row("timeout_s", "--timeout", SECONDS, 60.0, "run", "seconds rank 0 waits for every rank to report (default 60)",
         agree=True, metavar="SECONDS", field="timeouts.run_s"),
    _row("check_timeout_s", "--check-timeout", SECONDS, 10.0, "run",
         "seconds one check or fact gatherer may take before it is could-not-run (`preflight explain could-not-run`) "
         "(default 10)", agree=True, metavar="SECONDS", field="timeouts.check_s"),
    _row("out_dir", "--out-dir", PATH, None, "run",
         "shared directory (cluster filesystem): fallback channel when the c10d store cannot form, and where each "
         "rank leaves its own report if rank 0 is lost (default: none)", agree=True, metavar="DIR"),
    _row("run_id", "--run-id", RUN_ID, None, "run",
         "override the run id (default: derived from the launcher's job id, e.g. SLURM_JOB_ID; 1-200 printable "
         "characters, no spaces)", api=False, metavar="ID"),
    _row("silence", "--silence", NAMES, [], "run", "drop findings of these check ids, e.g. ENV004,BW011 (default: "
         "none; `preflight list` shows the ids)", metavar="ID[,ID]"),
    _row("only", "--only", NAMES, [], "run", "run only checks of these tags (default: all); tags: {tags}",
         agree=True, metavar="TAG[,TAG]"),
    _row("skip", "--skip", NAMES, [], "run", "skip checks of these tags (default: none; `--skip probe` skips the "
         "bandwidth probes); tags: {tags}", agree=True, metavar="TAG[,TAG]"),
    _row("strict", "--strict", FLAG, False, "run", "exit 1 when there are warnings (default: warnings exit 0)"),
    _row("fingerprint", "--fingerprint", NAMES, [], "run", "also fingerprint these installed distributions' builds "
         "(default: torch, nvidia-* wheels and preflight; BLD001 compares them across hosts)", agree=True,
         api=False, metavar="PKG[,PKG]"),
    _row("sysfs_root", "--sysfs-root", PATH, "/sys", "run", "tests: a fixture sysfs tree (default /sys)",
         api=False, internal=True),
    _row("verdict_file", "--verdict-file", PATH, None, "run", "launch's own channel to its ranks (default: none)",
         api=False, internal=True),
    # -- reports --
    _row("json", "--json", PATH, None, "reports", "write the whole JobReport as JSON; - for stdout, the verdict "
         "then on stderr (default: not written; `preflight report` re-renders it)", field="reports.json",
         metavar="PATH"),
    _row("html", "--html", PATH, None, "reports", "write a self-contained HTML report, no network needed "
         "(default: not written)", field="reports.html", metavar="PATH"),
    _row("junit", "--junit", PATH, None, "reports", "write JUnit XML, one testcase per check, for CI "
         "(default: not written)", field="reports.junit", metavar="PATH"),
    _row("text", "--text", PATH, None, "reports", "write the plain text report (default: not written)",
         field="reports.text", metavar="PATH"),
    _row("exclude_file", "--exclude-file", PATH, None, "reports", "write the bad hosts one per line, for "
         "`sbatch --exclude` (default: not written)", field="reports.exclude", metavar="PATH"),
    _row("quiet", "--quiet", FLAG, False, "reports", "print nothing on stdout (default: print the report)",
         field="reports.quiet"),
    _row("stdout_held", "--stdout-held", FLAG, False, "reports", "launch's own: it writes the report asked for as "
         "- to stdout after the run; the verdict goes to stderr (default: off)", field="reports.stdout_held",
         api=False, internal=True),
    # -- history --
    _row("history", "--history", TEXT_OR_NONE, None, "history", "record the run and judge it against its past: "
         "sqlite:///path/history.db or postgresql://user@host/db (default: $PREFLIGHT_HISTORY)",
         env="PREFLIGHT_HISTORY", metavar="URL", field="history.url"),
    _row("history_timeout_s", "--history-timeout", SECONDS, 10.0, "history",
         "seconds the history may take before and after the verdict (default 10)",
         api=False, metavar="SECONDS", field="timeouts.history_s"),
    _row("flaky", "--flaky", TEXT, "", "history", "a host that failed in K of its last N recorded runs is flaky "
         "(default 3/10)", api=False, field="", sets=("history.flaky_failures", "history.flaky_window"), metavar="K/N"),
    _row("metrics", "--metrics", PATH, None, "history", "write the run's figures as Prometheus text for "
         "node_exporter's textfile collector (default: not written)", metavar="PATH", field="history.metrics"),
    # -- probes --
    _row("mesh", "--mesh", TEXT, "", "probes", "DeviceMesh shape, outermost first, e.g. pp2,tp4 (a missing dp is "
         "derived); names: pp, dp, dp_replicate, dp_shard, cp, ep, tp or any identifier (default: the world as "
         "one dimension)", agree=True, api=False, field="", sets=("probes.mesh",), metavar="SHAPE"),
    _row("backend", "--backend", choice("--backend", BACKENDS), "auto", "probes", "process group backend for the "
         "probes: auto (default: nccl when every rank has a GPU, else gloo), nccl, gloo",
         agree=True, api=False, field="probes.backend"),
    _row("level", "--level", choice("--level", tuple(LEVELS)), DEFAULT_LEVEL, "probes", "how much to measure, as "
         "DCGM's levels: {levels}; an option given explicitly wins over its level (default: standard)", agree=True,
         field="probes.level"),
    _row("ops", "--ops", TEXT, "", "probes", "collectives to probe; valid: {ops} (default: the level's; "
         "{default_ops} at standard; send_recv pairs adjacent pp stages)", agree=True, field="",
         sets=("probes.ops",), metavar="OP[,OP]"),
    _row("sizes", "--sizes", TEXT, "", "probes", "message sizes in bytes; K/M/G are binary as in nccl-tests "
         "(1M = 1 MiB = 1,048,576), KiB/MiB/GiB too, KB/MB/GB are SI (1MB = 1,000,000); a range as nccl-tests' "
         "-b/-e/-f: 1M:64M doubles, 1M:64M:x4 multiplies by 4, 1M:4M:+1M adds 1M (default: the level's; "
         "{cpu_sizes} on CPU, {gpu_sizes} on GPU at standard)", agree=True, field="", sets=("probes.sizes",),
         metavar="SIZE[,SIZE|BEGIN:END[:xF]]"),
    _row("warmup", "--warmup", COUNT, None, "probes", "untimed iterations per step, 0 or more (default: the level's; "
         "{cpu_warmup} on CPU, {gpu_warmup} on GPU at standard)", agree=True, api=False, metavar="N",
         field="probes.warmup"),
    _row("iters", "--iters", COUNT, None, "probes", "timed iterations per step, 1 or more (default: the level's; "
         "{cpu_iters} on CPU, {gpu_iters} on GPU at standard; with fewer than 5 no straggler can be named)",
         agree=True, api=False, metavar="N", field="probes.iters"),
    _row("probe_timeout_s", "--probe-timeout", SECONDS, 30.0, "probes", "deadline of one collective (default 30)",
         agree=True, metavar="SECONDS", field="timeouts.probe_s"),
    _row("straggler_ratio", "--straggler-ratio", RATIO, 0.8, "probes", "a group below RATIO x its siblings' median "
         "busbw is a straggler candidate, 0 < RATIO <= 1 (default 0.8); confirmed twice below 0.5 it is an error "
         "(`preflight explain BW003`, `preflight explain siblings`)",
         api=False, metavar="RATIO", field="probes.straggler_ratio"),
    _row("expect", "--expect", TEXT, "", "probes", "expected busbw per mesh dimension, e.g. tp=300GB/s,dp=400Gb/s, "
         "and device figures, e.g. gemm=700TFLOPS,hbm=2.8TB/s,h2d=50GB/s (`preflight explain expectations`); units "
         "GB/s (1e9 B/s, nccl-tests' busbw), MB/s, TB/s, GiB/s or G/s (binary), Gb/s (bits); below 0.9x is an "
         "error (default: none; a hardware profile on NCCL)", agree=True, field="",
         sets=("probes.expect", "device.expect", "clock_skew_s", "storage.expect_write", "storage.expect_read"),
         metavar="DIM=RATE[,DIM=RATE]"),
    _row("localize", "--localize", choice("--localize", LOCALIZE), "auto", "probes", "how slow groups are localized "
         "(`preflight explain localize`): auto (default), pairwise (the round robin only), grouptest (group "
         "testing among hosts whenever it can run)", api=False, field="probes.localize"),
    _row("strict_bandwidth", "--strict-bandwidth", FLAG, False, "probes", "a group below 0.9x its hardware "
         "profile is an error (BW007), not a warning (BW011); below --expect it is an error either way (default: "
         "off; `preflight explain expectations`)", api=False, field="probes.strict_bandwidth"),
    # -- device probes --
    _row("device_budget_s", "--device-budget", SECONDS_OR_NONE, None, "device", "seconds the device probes may "
         "take per device (default 4 on a GPU, 0.03 on CPU; `--skip gpu-probe` turns them off)", agree=True,
         metavar="SECONDS", field="device.budget_s"),
    _row("device_sustain_s", "--device-sustain", SECONDS_OR_ZERO, 0.0, "device", "seconds of continuous bf16 work "
         "on each GPU after the device probes, its clocks and temperature read throughout (`preflight explain "
         "sustain`) (default 0: none)", agree=True, metavar="SECONDS", field="device.sustain_s"),
    # -- storage --
    _row("storage", "--storage", PATH, None, "storage", "the checkpoint directory every rank must see as one shared "
         "filesystem: checked for visibility, sameness, room and write/read speed (default: $PREFLIGHT_STORAGE; "
         "none: the family does not run)", agree=True, env="PREFLIGHT_STORAGE", field="", sets=("storage.path",),
         metavar="PATH"),
    _row("checkpoint_size", "--checkpoint-size", TEXT, "", "storage", "what one save writes in total over all "
         "ranks, e.g. 800G (K/M/G/T binary): the path needs room for {headroom} (the previous checkpoint is kept "
         "until the new one is complete), and the report projects one save and one restore (default: none)",
         agree=True, field="", sets=("storage.checkpoint_size",), metavar="SIZE"),
    _row("storage_budget", "--storage-budget", TEXT, "", "storage", "the most one rank writes and reads back per "
         "pass (default {budget}; each rank writes checkpoint-size / world when that is smaller)", agree=True,
         field="", sets=("storage.budget",), metavar="SIZE"),
)

BY_NAME = {option.name: option for option in OPTIONS}
API_OPTIONS = tuple(option for option in OPTIONS if option.api)
AGREEING = tuple(option for option in OPTIONS if option.agree)
# Each RunOptions field as the CLI spells it, for error messages: `timeout_s (--timeout)`.
FLAGS: dict[str, str] = {}
for _option in OPTIONS:
    for _name in _option.fields:
        FLAGS.setdefault(_name, _option.flag)


def option_name(name: str) -> str:
    """An option (by its name) or a field (by its last part) as both front doors spell it: `timeout_s (--timeout)`."""
    flag = BY_NAME[name].flag if name in BY_NAME else FLAGS.get(name)
    return f"{name} ({flag})" if flag else name


def help_values() -> dict[str, str]:
    """The computed parts of the help texts: the probe plan's defaults, the tags, the storage defaults."""
    from preflight.lib.storage_options import DEFAULT_BUDGET, HEADROOM
    from preflight.lib.units import human_bytes
    from preflight.probes.plan import DEFAULT_ITERS, DEFAULT_OPS, DEFAULT_SIZES, DEFAULT_WARMUP
    from preflight.registry import Tags

    def sizes(device: str) -> str:
        return ",".join(f"{size >> 20}M" for size in DEFAULT_SIZES[device])

    return {"tags": ", ".join(Tags.all()), "ops": ", ".join(OPS), "default_ops": ",".join(DEFAULT_OPS),
            "cpu_sizes": sizes("cpu"), "gpu_sizes": sizes("cuda"), "cpu_warmup": str(DEFAULT_WARMUP["cpu"]),
            "gpu_warmup": str(DEFAULT_WARMUP["cuda"]), "cpu_iters": str(DEFAULT_ITERS["cpu"]),
            "gpu_iters": str(DEFAULT_ITERS["cuda"]), "levels": level_help(),
            "headroom": f"{HEADROOM:g}", "budget": human_bytes(DEFAULT_BUDGET)}


def markdown() -> str:
    """The table as docs/options.md shows it (tests/test_options_table.py keeps the page equal to it)."""
    values = help_values()
    lines = ["| flag | `preflight.check` keyword | env | default | values | group | ranks agree | what it does |",
             "|---|---|---|---|---|---|---|---|"]
    for option in OPTIONS:
        if option.internal:
            continue
        keyword = f"`{option.name}=`" if option.api else "-"
        default = "-" if option.default in (None, "", []) else f"`{option.default}`"
        cells = [f"`{option.flag}`", keyword, f"`{option.env}`" if option.env else "-", default, option.kind.what,
                 option.group, "yes" if option.agree else "-", option.help_text(values).replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
