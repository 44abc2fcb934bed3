"""`pip install .` into a fresh venv works from any directory; no generic top-level modules."""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
from pathlib import Path

import tomllib

from tests.helpers.ranks import base_env

REPO = Path(__file__).resolve().parents[1]


def test_fresh_venv_install_runs_outside_the_source_tree(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    query = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", query], check=True, capture_output=True,
                             text=True).stdout.strip()
    # torch and the other dependencies come from the test environment (a second copy of torch
    # would cost a minute and 900 MB); preflight itself is installed, not editable, with --no-deps.
    (Path(purelib) / "deps-from-test-env.pth").write_text(site.getsitepackages()[0] + "\n")
    # From a copy without build outputs: setuptools reuses a checkout's stale build/lib.
    source = tmp_path / "source"
    skipped = shutil.ignore_patterns(".*", "build", "*.egg-info", "artifacts", "__pycache__")
    shutil.copytree(REPO, source, ignore=skipped)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(source)], check=True, timeout=300,
                   capture_output=True)
    installed = sorted(p.name for p in Path(purelib).iterdir())
    assert "preflight" in installed and "checks" not in installed and "reports" not in installed
    assert (Path(purelib) / "preflight" / "checks" / "nccl.py").exists()

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = base_env({"PATH": f"{venv / 'bin'}:/usr/bin:/bin"})
    env.pop("PYTHONPATH", None)
    helped = subprocess.run(["preflight", "--help"], cwd=outside, env=env, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "launch" in helped.stdout
    launched = subprocess.run(["preflight", "launch", "-n", "2", "--skip", "probe", "--json", "r.json"], cwd=outside,
                              env=env, capture_output=True, text=True, timeout=180)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "PASSED" in launched.stdout
    report = json.loads((outside / "r.json").read_text())
    assert report["meta"]["world_size"] == 2
    # From a source checkout too (the README's first command runs there): the workers must
    # import the installed package, not the checkout's `preflight/` folder.
    in_checkout = subprocess.run(["preflight", "launch", "-n", "2", "--skip", "probe", "--json",
                                  str(tmp_path / "checkout.json")], cwd=REPO, env=env, capture_output=True,
                                 text=True, timeout=180)
    assert in_checkout.returncode == 0, in_checkout.stdout + in_checkout.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import preflight; print(preflight.__file__)"],
                           cwd=outside, env=env, capture_output=True, text=True, timeout=60).stdout
    assert where.startswith(purelib)


def test_every_source_folder_is_a_package_setuptools_finds() -> None:
    """packages.find installs folders with an __init__.py: a folder of modules without one is lost."""
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert include["include"] == ["preflight", "preflight.*"]
    lost = sorted(str(folder.relative_to(REPO)) for folder in {p.parent for p in (REPO / "preflight").rglob("*.py")}
                  if not (folder / "__init__.py").exists())
    assert not lost, f"folders of modules that would not be installed: {lost}"


def test_a_source_checkout_runs_as_it_installs() -> None:
    """From the repository root, `python -m preflight` imports the source folder, which is whole."""
    listed = subprocess.run([sys.executable, "-m", "preflight", "list"], cwd=REPO, env=base_env({}),
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "NCCL001" in listed.stdout and "BW003" in listed.stdout
