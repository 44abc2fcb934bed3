"""Two real runs of four env:// ranks with the same options, one with a planted slow rank (rank 3
sleeps 50 ms in every collective, from the test side: tests/helpers/ranks.plant_env), the other clean.

JUnit lists the same testcases, by the same `ID: title` names, in both (CI trend tools never see
tests appear and vanish), and the failure's message is the specific finding. Every view puts
the culprit's own finding (BW004, rank 3) first: text, HTML findings and "What to do", JSON.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.ranks import plant_env, spawn_env_ranks, what_ranks_said
from tests.probes.test_probes_gloo import SLEEP_50MS_IN_EVERY_COLLECTIVE

# env:// ranks, forked by the test zygote with the plant in place (under `preflight launch` a planted rank
# must be an interpreter of its own: eight torch imports for what the reports show, not the launcher).
OPTIONS = ["--mesh", "dp2,tp2", "--sizes", "64KiB,256KiB", "--warmup", "1", "--iters", "5"]


@dataclass
class Run:
    """What one run wrote, by format."""

    code: int
    folder: Path

    def read(self, name: str) -> str:
        return (self.folder / name).read_text()


def _run(folder: Path, env: dict[str, str] | None) -> Run:
    folder.mkdir()
    outputs = [f"--{kind}={folder / name}" for kind, name in
               (("json", "r.json"), ("html", "r.html"), ("junit", "r.xml"), ("text", "r.txt"))]
    ranks = spawn_env_ranks(4, [*OPTIONS, *outputs, "--quiet"], common_env=env, timeout=300)
    assert (folder / "r.json").exists(), what_ranks_said(ranks)
    return Run(ranks[0].returncode, folder)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    """(clean, planted): the same options, rank 3 slow in the second."""
    root = tmp_path_factory.mktemp("slow-rank")
    clean = _run(root / "clean", None)
    planted = _run(root / "planted", plant_env(root, {3: SLEEP_50MS_IN_EVERY_COLLECTIVE}))
    assert planted.code == 3, planted.read("r.txt")
    return clean, planted


def _cases(run: Run) -> dict[str, ET.Element]:
    return {case.get("name"): case for case in ET.fromstring(run.read("r.xml")).iter("testcase")}


def test_junit_names_are_the_same_set_in_a_passing_and_a_failing_run(runs: tuple[Run, Run]) -> None:
    clean, planted = runs
    names = set(_cases(clean)), set(_cases(planted))
    assert names[0] == names[1], names[0] ^ names[1]
    bw = {name for name in names[1] if name.startswith("BW")}
    assert {"BW003", "BW004", "BW013"} <= {name.split(":")[0] for name in bw}
    assert all(re.fullmatch(r"[A-Z]+\d{3}: \S.*", name) for name in names[1]), sorted(names[1])


def test_junit_failure_message_is_the_specific_finding(runs: tuple[Run, Run]) -> None:
    _, planted = runs
    [failure] = [case.find("failure") for name, case in _cases(planted).items() if name.startswith("BW004:")]
    report = json.loads(planted.read("r.json"))
    [bw004] = [f for f in report["findings"] if f["check_id"] == "BW004"]
    assert failure.get("message").startswith("rank 3 on ") and bw004["message"] in failure.get("message")
    assert bw004["hint"] not in failure.get("message") and bw004["hint"] in failure.text


def test_the_culprits_own_finding_is_first_in_every_view(runs: tuple[Run, Run]) -> None:
    _, planted = runs
    report = json.loads(planted.read("r.json"))
    [own] = [f for f in report["findings"] if f["check_id"] == "BW004"]
    assert own["ranks"] == [3]
    assert report["findings"][0]["check_id"] == "BW004"  # JSON order
    assert any(f["check_id"] == "BW003" for f in report["findings"])  # the groups it slowed come after
    text = planted.read("r.txt").splitlines()
    header = next(i for i, line in enumerate(text) if line.startswith("severity"))
    assert text[header + 2].split()[1] == "BW004", text[header + 2]  # under the header and its rule
    page = planted.read("r.html")
    assert re.findall(r'<tr class="finding" [^>]*data-check="([A-Z]+\d+)"', page)[0] == "BW004"
    todo = page.split('<ol class="todo">', 1)[1].split("</ol>", 1)[0]
    first_item = todo.split("</li>", 1)[0]
    assert '<span class="todo-where">BW004' in first_item and "rank 3" in first_item, first_item
