"""How tests/conftest.py splits the suite over xdist workers: the module groups and the order."""

from __future__ import annotations

import subprocess
import types

from tests.conftest import QUIET_GROUP, SHARED_PER_WORKER, check_group, dealt_by_module, starts_processes
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

    def __init__(self, nodeid: str, marks: tuple[str, ...] = (), fixtures: tuple[str, ...] = (),
                 scopes: dict[str, str] | None = None) -> None:
        self.nodeid, self.marks, self.fixturenames = nodeid, marks, list(fixtures)
        if scopes:  # fixture -> its scope, each defined in a module of tests/ (as pytest's FixtureDef says)
            def defined_here() -> None: ...
            defined_here.__module__ = "tests.probes.test_x"
            self._fixtureinfo = types.SimpleNamespace(name2fixturedefs={
                name: [types.SimpleNamespace(func=defined_here, scope=scope)] for name, scope in scopes.items()})

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


def test_a_module_fixture_outside_every_group_is_refused_unless_made_per_worker_by_choice() -> None:
    """A module-scoped launched run out of every group would be made once per worker that runs its tests
    (issue 44: test_nccl_account_run's three runs were made twice, test_fabric_multirank's thrice)."""
    stray = check_group(FakeItem("tests/probes/test_elsewhere.py::test_x", fixtures=("runs",),
                                 scopes={"runs": "module"}))
    assert stray is not None and "'module:tests/probes/test_elsewhere.py'" in stray
    # A function-scoped fixture of ours is made per test anyway: no group needed.
    assert check_group(FakeItem("tests/probes/test_elsewhere.py::test_x", fixtures=("one",),
                                scopes={"one": "function"})) is None
    # In its own module group, or in any group (one worker runs the module), it is made once.
    assert check_group(FakeItem("tests/probes/test_nccl_account_run.py::test_x", fixtures=("runs",),
                                scopes={"runs": "module"})) is None
    assert check_group(FakeItem("tests/reports/test_html_size.py::test_x", fixtures=("big",),
                                scopes={"big": "module"})) is None
    # The cheap one, left to every worker by choice.
    assert SHARED_PER_WORKER and all(check_group(FakeItem(f"{path}::test_x", fixtures=("f",), scopes={"f": "module"}))
                                     is None for path in SHARED_PER_WORKER)


def test_tests_that_start_processes_are_dealt_round_robin_over_their_modules() -> None:
    ids = ["a.py::1", "a.py::2", "a.py::3", "b.py::1", "c.py::1", "c.py::2"]
    dealt = dealt_by_module([FakeItem(nodeid) for nodeid in ids])
    assert [item.nodeid for item in dealt] == ["a.py::1", "b.py::1", "c.py::1", "a.py::2", "c.py::2", "a.py::3"]
