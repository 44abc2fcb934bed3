"""Every output written is announced (issue 45, item 5): one line each on stderr, an absolute path and a
size; a three-slash sqlite URL's file shown where it really went."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.ranks import run_cli


def test_a_run_announces_every_output_with_its_absolute_path_and_size(tmp_path: Path) -> None:
    done = run_cli(["launch", "-n", "2", "--skip", "probe", "--json", "r.json", "--html", "r.html", "--junit",
                    "r.xml", "--text", "r.txt", "--exclude-file", "bad.txt", "--metrics", "m.prom",
                    "--history", "sqlite:///h/relative.db"], cwd=str(tmp_path), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("preflight: wrote ")
            or line.startswith("preflight: recorded ")]
    for what, name in (("json report", "r.json"), ("html report", "r.html"), ("junit report", "r.xml"),
                       ("text report", "r.txt"), ("exclude-file", "bad.txt"), ("metrics", "m.prom")):
        size = (tmp_path / name).stat().st_size
        [line] = [x for x in said if x.startswith(f"preflight: wrote {what} {tmp_path / name} (")]
        shown = re.search(r"\((\d+(?:\.\d)?) (B|kB|MB)\)$", line)
        assert shown, line
        factor = {"B": 1, "kB": 1e3, "MB": 1e6}[shown.group(2)]
        assert abs(float(shown.group(1)) * factor - size) <= max(0.06 * size, 1), (line, size)
    [history] = [x for x in said if x.startswith("preflight: recorded the run in history ")]
    database = tmp_path / "h" / "relative.db"
    assert database.exists() and f"history {database} (sqlite, " in history, history
    assert "sqlite:///h/relative.db is relative to the current folder" in history


def test_quiet_announces_nothing(tmp_path: Path) -> None:
    done = run_cli(["launch", "-n", "2", "--skip", "probe", "--json", "r.json", "--quiet"], cwd=str(tmp_path),
                   timeout=240)
    assert (tmp_path / "r.json").exists() and "preflight: wrote" not in done.stderr + done.stdout


def test_launchs_own_copy_of_rank_0s_report_is_not_announced(tmp_path: Path) -> None:
    """`preflight launch` keeps rank 0's JSON in a folder of its own: not the user's output, not announced."""
    done = run_cli(["launch", "-n", "2", "--skip", "probe"], cwd=str(tmp_path), timeout=240)
    assert done.returncode == 0 and "preflight: wrote" not in done.stderr, done.stderr
