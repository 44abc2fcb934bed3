"""BLD001/BLD002: the same version string, another build; the gatherer on a real installed wheel.

The wheels are real: built here (a wheel is a zip with a RECORD), installed by pip into a target
folder, fingerprinted by preflight/steps/gather/build.py through importlib.metadata.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from preflight.model import RankFacts, World
from preflight.steps.gather import GatherOptions, build
from tests.helpers.facts import rank_facts, run


def make_wheel(folder: Path, name: str, version: str, content: str) -> Path:
    """A pure-Python wheel of one module whose text is `content`, built by hand (the format is a zip)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": content, f"{name}/data.txt": "same on every build\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    lines = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(text.encode())}")
    lines.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "\n".join(lines) + "\n")
    return wheel


def install(wheel: Path, target: Path) -> Path:
    """pip install --target: a folder that, first on PYTHONPATH, holds this build."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)], check=True,
                   capture_output=True, timeout=120)
    return target


def fingerprinted(target: Path, name: str, monkeypatch) -> RankFacts:
    monkeypatch.syspath_prepend(str(target))
    facts = RankFacts(rank=0, host="h", world=World("env", 0, 1))
    build.gather(facts, GatherOptions(fingerprint=[name]))
    return facts


def test_a_rebuilt_wheel_under_the_same_version_is_another_digest_naming_its_file(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    one = install(make_wheel(tmp_path / "w1", "pftiny", "1.0", "X = 1\n"), tmp_path / "t1")
    two = install(make_wheel(tmp_path / "w2", "pftiny", "1.0", "X = 2\n"), tmp_path / "t2")
    a = fingerprinted(one, "pftiny", monkeypatch)
    monkeypatch.undo()
    b = fingerprinted(two, "pftiny", monkeypatch)
    [da] = [d for d in a.placement.build.dists if d.name == "pftiny"]
    [db] = [d for d in b.placement.build.dists if d.name == "pftiny"]
    assert da.version == db.version == "1.0"
    assert da.digest and db.digest and da.digest != db.digest
    assert da.files["pftiny/data.txt"] == db.files["pftiny/data.txt"]
    assert da.files["pftiny/__init__.py"] != db.files["pftiny/__init__.py"]
    # torch is always fingerprinted; its 14,000-line RECORD travels as file-group digests only.
    [torch] = [d for d in a.placement.build.dists if d.name == "torch"]
    assert torch.count > 400 and len(torch.buckets) == 64 and not torch.files


def _facts(rank: int, host: str, files: dict[str, str], digest: str) -> RankFacts:
    dist = {"name": "pftiny", "version": "1.0", "digest": digest, "count": len(files), "files": files,
            "location": f"/site/{host}"}
    return rank_facts(rank, host, world_size=4, placement={"build": {"dists": [dist]}})


def test_bld001_names_the_odd_host_and_the_file_that_differs() -> None:
    same = {"pftiny/__init__.py": "sha256=aaa", "pftiny/data.txt": "sha256=ddd"}
    odd = {**same, "pftiny/__init__.py": "sha256=bbb"}
    ranks = [_facts(0, "n1", same, "d1"), _facts(1, "n2", same, "d1"), _facts(2, "n3", odd, "d2"),
             _facts(3, "n4", same, "d1")]
    [finding] = run("BLD001", ranks)
    assert finding.hosts == ["n3"] and finding.ranks == [2]
    assert "pftiny" in finding.message and "pftiny/__init__.py" in finding.message
    assert "data.txt" not in finding.message
    assert finding.data["files"] == ["pftiny/__init__.py"]


def test_bld001_is_silent_on_equal_builds_and_leaves_other_versions_to_their_own_group() -> None:
    same = {"pftiny/__init__.py": "sha256=aaa"}
    assert run("BLD001", [_facts(r, f"n{r}", same, "d1") for r in range(4)]) == []
    assert run("BLD001", [_facts(0, "n0", same, ""), _facts(1, "n1", same, "d1")]) == []  # no RECORD: not compared


class _CountedReads(list):
    """A fingerprint's distributions that count how often a check walks them."""

    def __init__(self, items: list) -> None:
        super().__init__(items)
        self.walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


def test_bld001_reads_a_fingerprint_that_many_hosts_sent_once_and_still_names_the_odd_one() -> None:
    """Rank 0 holds one object per distinct fingerprint (its hosts' ranks share it): BLD001 reads its
    distributions once, not once per rank and distribution (16,384 hosts x 60 distributions: 2-3 s)."""
    same = {"pftiny/__init__.py": "sha256=aaa"}
    ranks = [_facts(r, f"n{r}", same, "d1") for r in range(200)] + [_facts(200, "n200", same, "d2")]
    shared = ranks[0].placement.build
    shared.dists = counted = _CountedReads(shared.dists)
    for facts in ranks[1:200]:
        facts.placement.build = shared
    [finding] = run("BLD001", ranks)
    assert finding.ranks == [200] and finding.hosts == ["n200"] and "200 hosts" in finding.message
    assert counted.walks == 1


def test_bld002_names_a_rank_outside_the_common_container() -> None:
    ranks = [rank_facts(r, f"n{r}", world_size=3, placement={"build": {"container": c, "taken": True}})
             for r, c in enumerate(["apptainer:/img/a.sif", "apptainer:/img/a.sif", "apptainer:/img/old.sif"])]
    [finding] = run("BLD002", ranks)
    assert finding.hosts == ["n2"] and "old.sif" in finding.message
    # A node's other ranks fingerprint nothing (only its local rank 0 does): never "no container".
    others = [rank_facts(r, f"n{r % 3}", world_size=6) for r in range(3, 6)]
    assert run("BLD002", ranks[:2] + others) == []
