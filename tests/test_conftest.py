"""How tests/conftest.py splits the suite over xdist workers: the module groups and the order."""

from __future__ import annotations

import subprocess
import types

from tests.conftest import QUIET_GROUP, check_group, starts_processes
from tests.helpers.ranks import run_cli


def _module(**names: object) -> types.ModuleType:
    module = types.ModuleType("fake_test_module")
    module.__dict__.update(names)
    return module


def test_a_module_that_uses_the_rank_helpers_or_subprocess_starts_processes_and_goes_out_first() -> None:
    seen: dict[object, bool] = {}
    assert starts_processes(_module(run_cli=run_cli), seen)
    assert starts_processes(_module(subprocess=subprocess), seen)
    assert not starts_processes(_module(json=__import__("json"), helper=len), seen)
    assert not starts_processes(None, seen)


class FakeItem:
    """What check_group reads of a collected test: its id, markers and fixtures."""

    _fixtureinfo = None

    def __init__(self, nodeid: str, marks: tuple[str, ...] = (), fixtures: tuple[str, ...] = ()) -> None:
        self.nodeid, self.marks, self.fixturenames = nodeid, marks, list(fixtures)

    def iter_markers(self) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(name=name) for name in self.marks]

    def get_closest_marker(self, name: str) -> types.SimpleNamespace | None:
        return types.SimpleNamespace(name=name) if name in self.marks else None


def test_a_quiet_test_is_refused_outside_the_quiet_group_which_may_hold_netns_tests() -> None:
    stray = check_group(FakeItem("tests/probes/test_elsewhere.py::test_x", ("quiet",)))
    assert stray is not None and repr(QUIET_GROUP) in stray
    # The quiet group stands in for a module's own netns group (one worker runs all of it)...
    netns = FakeItem("tests/probes/test_probes_netns.py::test_x", ("netns", "quiet"), ("netns_hosts",))
    assert check_group(netns) is None
    # ...but not for the Slurm cluster's, which another worker's tests share.
    assert check_group(FakeItem("tests/test_api_meshes.py::test_x", ("slurm",))) is not None
    # The quiet lock's own inner run (not a test_ module) is left alone.
    assert check_group(FakeItem("tests/helpers/quiet_cases.py::test_quiet", ("quiet",))) is None
