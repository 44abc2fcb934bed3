"""Nothing in the README, docs/ or a docstring refers to a file the repository does not have.

Checked in README.md and docs/*.md:
- every relative markdown link or image, and its #anchor where it points into a markdown file;
- every repository path named in the text, code blocks included, that starts with one of the
  repository's folders (`docs/`, `benchmarks/`, `sbatch/`, `tests/`, `preflight/`, `.ci/`) or
  with one of the package's own folders (`checks/`, `steps/`, ...), which resolve under
  `preflight/` as the code cites them;
- every `*.md` file named anywhere (a design document the repository lacks is the classic).
Checked in every docstring of preflight/, benchmarks/ and tests/: the same repository paths.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PACKAGE = REPO / "preflight"
PACKAGE_FOLDERS = tuple(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))
FOLDERS = ("docs", "benchmarks", "sbatch", "tests", "preflight", ".ci", *PACKAGE_FOLDERS)
SOURCES = sorted(path for folder in ("preflight", "benchmarks", "tests") for path in (REPO / folder).rglob("*.py"))

LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
FOLDER_NAMES = "|".join(re.escape(folder) for folder in FOLDERS)
REPO_PATH = re.compile(rf"(?<![\w./<-])((?:{FOLDER_NAMES})/[\w./-]*\w)")
MD_FILE = re.compile(r"(?<![\w./<-])([\w./-]*\w\.md)\b")
EXTERNAL = ("http://", "https://", "mailto:")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, -1/-2 for repeats."""
    seen: dict[str, int] = {}
    anchors = set()
    in_fence = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_fence or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _exists(name: str, doc: Path) -> bool:
    """A path named in doc exists, relative to the doc's folder, the repository root or the package.

    `tests/helpers/ranks.plant_env` (a module's path, then a name in it) exists when the module
    does and defines that name.
    """
    if any((base / name).exists() for base in (doc.parent, REPO, PACKAGE)):
        return True
    module, _, attribute = name.rpartition(".")
    if not module or not attribute.isidentifier():
        return False
    for base in (doc.parent, REPO, PACKAGE):
        path = base / f"{module}.py"
        if path.is_file():
            defined = rf"^\s*(?:def|class)\s+{attribute}\b|^{attribute}\s*[:=]"
            return re.search(defined, path.read_text(), re.MULTILINE) is not None
    return False


def _docstrings(source: Path) -> list[tuple[int, str]]:
    """Every docstring of a module (the module's, its classes' and functions'), with its line."""
    tree = ast.parse(source.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                found.append((node.body[0].lineno, text))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_anchors_exist(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if target.startswith(EXTERNAL):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(REPO) if file.is_relative_to(REPO) else file}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{doc.relative_to(REPO)}: broken links: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_named_repository_paths_exist(doc: Path) -> None:
    text = doc.read_text()
    named = set(REPO_PATH.findall(text)) | set(MD_FILE.findall(text))
    missing = sorted(name for name in named if not _exists(name.rstrip("."), doc))
    assert not missing, f"{doc.relative_to(REPO)} names files the repository does not have: {missing}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_paths_cited_in_docstrings_exist(source: Path) -> None:
    missing = []
    for line, text in _docstrings(source):
        named = set(REPO_PATH.findall(text)) | set(MD_FILE.findall(text))
        # A path above the repository (`../shared/LAB.md`, the lab notes beside a checkout) is not ours to check.
        missing += [f"line {line}: {name}" for name in sorted(named)
                    if not name.startswith("../") and not _exists(name.rstrip("."), source)]
    assert not missing, f"{source.relative_to(REPO)} cites files the repository does not have: {missing}"


def test_the_scanners_find_what_they_should() -> None:
    text = ("see [x](docs/a.md#b), ![p](report.png), `benchmarks/y.py --n 1`, run tests/helpers/x.py;"
            " DESIGN.md; not https://h/tests/z.py, not /sys/class/x, not `preflight/<run id>/`")
    assert LINK.findall(text) == ["docs/a.md#b", "report.png"]
    assert set(REPO_PATH.findall(text)) == {"docs/a.md", "benchmarks/y.py", "tests/helpers/x.py"}
    assert set(MD_FILE.findall(text)) == {"docs/a.md", "DESIGN.md"}
    assert {"step-1-world", "the-model", "a-b"} <= _anchors("## Step 1: World\n### The model\n# A: b\n")
    cited = _docstrings(Path(__file__))
    assert any("checks/" in text for _, text in cited)  # this module's own docstring is scanned
    assert _exists("checks/registry_is_not_here.py", Path(__file__)) is False
    assert _exists("checks/nccl.py", Path(__file__)) and _exists("steps/verdict.py", Path(__file__))
    assert _exists("tests/helpers/ranks.spawn_env_ranks", Path(__file__))
    assert not _exists("tests/helpers/ranks.no_such_helper", Path(__file__))


def test_the_architecture_layout_names_every_module() -> None:
    """docs/architecture.md's layout block is complete: every module of the package is named in it."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text[text.index("```\npreflight/\n"):]
    block = block[: block.index("\n```", 4)]
    words = set(re.findall(r"[\w.]+", block))
    missing = sorted(str(path.relative_to(REPO)) for path in PACKAGE.rglob("*.py")
                     if path.stem != "__init__" and path.stem not in words and path.name not in words)
    assert not missing, f"docs/architecture.md's layout block does not name: {missing}"
