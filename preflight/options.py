"""The run's options as plain data, validated where they enter (the CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunOptions:
    """Everything `preflight run` was asked to do. Strings are parsed by their own modules."""

    timeout_s: float = 60.0  # rank 0 waits at most this long for every rank to report
    check_timeout_s: float = 10.0  # one check or fact gatherer may take at most this long
    out_dir: str | None = None
    run_id: str | None = None
    silence: list[str] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    strict: bool = False
    # reports
    json_path: str | None = None
    html_path: str | None = None
    junit_path: str | None = None
    text_path: str | None = None
    exclude_file: str | None = None
    quiet: bool = False
    # probes
    mesh: str = ""
    backend: str = "auto"
    ops: str = ""
    sizes: str = ""
    warmup: int | None = None
    iters: int | None = None
    probe_timeout_s: float = 30.0
    straggler_ratio: float = 0.8
    expect: str = ""
    # facts
    sysfs_root: str = "/sys"
    verdict_file: str | None = None  # `preflight launch` reads rank 0's code here
    command_line: str = ""

    def probes_enabled(self) -> bool:
        """Probes run unless `--skip probe`, or `--only` names tags without `probe`."""
        if "probe" in self.skip:
            return False
        return not self.only or "probe" in self.only
