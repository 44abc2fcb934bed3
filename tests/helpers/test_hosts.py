"""The fake host and the plant hook themselves: what a process on a FakeHost sees, and one
sitecustomize.py that runs each rank's plant in that rank only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.hosts import fake_host
from tests.helpers.ranks import PYTHON, base_env, plant_env

SEE = (
    "import os, resource, socket\n"
    "shm = os.statvfs('/dev/shm')\n"
    "print(socket.gethostname(), socket.gethostbyname(socket.gethostname()), socket.gethostbyname('pfx-master'),\n"
    "      shm.f_blocks * shm.f_frsize >> 20, resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] >> 10,\n"
    "      sorted(os.listdir(os.environ['PFX_TARGET'])))\n"
)


def test_a_process_on_a_fake_host_sees_its_name_hosts_shm_limit_and_binds(tmp_path: Path) -> None:
    source, target = tmp_path / "only-here", tmp_path / "shared"
    source.mkdir()
    (source / "marker").write_text("x")
    target.mkdir()
    host = fake_host(tmp_path, "pfx-b", hosts={"pfx-master": "127.0.0.2"}, shm_size="32m", memlock_kib=512,
                     binds={source: target})
    seen = host.run([sys.executable, "-c", SEE], env={**base_env(), "PFX_TARGET": str(target)}).stdout.split(" ", 5)
    assert seen[:5] == ["pfx-b", "127.0.0.1", "127.0.0.2", "32", "512"]
    assert seen[5].strip() == "['marker']"
    assert list(target.iterdir()) == []  # the bind mount exists on the fake host only


def test_a_hosts_anchor_ends_with_the_process_that_started_it_though_nobody_killed_it(tmp_path: Path) -> None:
    """Most tests never call kill_started; their hosts' `sleep infinity` anchors once outlived the suite."""
    started = textwrap.dedent(f"""
        from pathlib import Path
        from tests.helpers.hosts import fake_host
        print(fake_host(Path({str(tmp_path)!r}), "pfx-anchor").entry()["anchor"])
    """)
    root = Path(__file__).parents[2]
    # stderr not a pipe: an anchor left running holds what it inherited, and run() would wait for it.
    anchor = int(subprocess.run([PYTHON, "-c", started], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, check=True, env={**base_env(), "PYTHONPATH": str(root)}).stdout)
    alive = os.path.exists(f"/proc/{anchor}") and Path(f"/proc/{anchor}/stat").read_text().split()[2] != "Z"
    if alive:
        os.kill(anchor, 9)
    assert not alive


def test_plant_env_runs_each_plant_in_its_rank_only_and_refuses_a_second_hook(tmp_path: Path) -> None:
    env = plant_env(tmp_path, {3: "print('three')", 1: """
        import sys
        print('one', file=sys.stderr)
    """})
    said = {}
    for rank in ("0", "1", "3", None):
        extra = {**env, "RANK": rank} if rank is not None else env
        done = subprocess.run([PYTHON, "-c", "pass"], env=base_env(extra), capture_output=True, text=True,
                              timeout=60, check=True)
        said[rank] = (done.stdout.strip(), done.stderr.strip())
    assert said == {"0": ("", ""), "1": ("", "one"), "3": ("three", ""), None: ("", "")}
    with pytest.raises(RuntimeError, match="one plant_env call"):
        plant_env(tmp_path, {2: "pass"})

