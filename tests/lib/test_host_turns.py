"""Turns among one job's processes on a host: a lock file of this user and job, 0600, gone after each turn."""

from __future__ import annotations

import itertools
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from preflight.lib.host_turns import job_identity, turn, turn_path


def test_the_lock_is_named_per_user_and_per_job(tmp_path: Path) -> None:
    one = turn_path("node1", "0000:10:00.0", job_identity("42", "10.0.0.1", 29500), str(tmp_path))
    again = turn_path("node1", "0000:10:00.0", job_identity("42", "10.0.0.1", 29500), str(tmp_path))
    other_job = turn_path("node1", "0000:10:00.0", job_identity("43", "10.0.0.1", 29500), str(tmp_path))
    other_switch = turn_path("node1", "0000:20:00.0", job_identity("42", "10.0.0.1", 29500), str(tmp_path))
    assert one == again and len({one, other_job, other_switch}) == 3
    assert f"-u{os.geteuid()}-" in os.path.basename(one) and "/" not in os.path.basename(
        turn_path("a/b", "../x", "j", str(tmp_path)))


def test_the_file_is_private_while_held_and_gone_after_the_turn(tmp_path: Path) -> None:
    path = turn_path("node1", "sw", "job", str(tmp_path))
    with turn(path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not os.path.exists(path)


def test_turns_never_overlap_though_each_holder_removes_the_file(tmp_path: Path) -> None:
    """The lock-file-with-unlink protocol: a waiter woken on a removed file opens the name again."""
    path = turn_path("node1", "sw", "job", str(tmp_path))
    spans: list[tuple[float, float]] = []
    guard = threading.Lock()

    def take() -> None:
        for _ in range(5):
            with turn(path):
                began = time.monotonic()
                time.sleep(0.005)
                with guard:
                    spans.append((began, time.monotonic()))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    spans.sort()
    assert len(spans) == 20 and all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    assert not os.path.exists(path)


def test_a_symlink_or_another_users_file_under_the_name_is_refused_in_one_line(tmp_path: Path) -> None:
    path = turn_path("node1", "sw", "job", str(tmp_path))
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(OSError):  # O_NOFOLLOW: never a file someone pointed the name at
        with turn(path):
            pass
    assert not (tmp_path / "elsewhere").exists()
    if os.geteuid() == 0:  # a squatter's file: only root can make one owned by someone else here
        os.unlink(path)
        Path(path).write_text("")
        os.chown(path, 65534, 65534)
        with pytest.raises(PermissionError, match="belongs to uid 65534"):
            with turn(path):
                pass


def test_the_machine_is_the_kernels_boot_id_and_empty_when_unreadable(tmp_path) -> None:
    from preflight.lib.host_turns import machine_id

    (tmp_path / "sys/kernel/random").mkdir(parents=True)
    (tmp_path / "sys/kernel/random/boot_id").write_text("3f1c2a9e-0000-4000-8000-000000000001\n")
    assert machine_id(str(tmp_path)) == "3f1c2a9e-0000-4000-8000-000000000001"
    assert machine_id(str(tmp_path / "absent")) == ""
    assert len(machine_id()) == 36  # this machine's, one uuid
