"""Fixtures shared by every test package, and how the suite splits over pytest-xdist workers."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cpu_account import worker_cpu_s
from tests.helpers.quiet import WorkerLocks, worker_locks

# One OpenMP thread in pytest's own processes too, as tests/helpers/ranks.base_env gives every rank, set
# before any test module imports torch: a test's in-process torch work (the fake CUDA's products, the
# probes on gloo) otherwise runs on a pool of two threads on two cores the other workers' ranks hold, and
# spins: a 64x64 product took 1.7 ms instead of 29 us on the loaded machine (issue 44).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The lab's DNS drops bursts of reverse lookups, and a c10d store answers a join only after its lookup of
# the client gives up: glibc's 5 s x 2 by default (24 joins at once: most answered at 5.01 s; 1.0 s with
# this). Dozens of joins at once across the suite's stores then outlast even the 15 s handshake and read as
# "another program holds MASTER_PORT". Every process the tests start inherits this; a store slowed by one
# resolver timeout is tests/channel/test_store_join.py's own case.
os.environ.setdefault("RES_OPTIONS", "timeout:1 attempts:1")

# netns_hosts: fake hosts in real network namespaces (needs root; see tests/helpers/netns.py, hosts.py).
pytest_plugins = ["tests.helpers.netns", "tests.helpers.postgres", "tests.helpers.node_exporter"]

# Which tests share a worker under `pytest -n 4 --dist loadgroup` (.ci/run): a group's tests run
# one after another on one worker, so two never run at once. Slurm: the loopback cluster listens
# on fixed ports, and both clusters are session fixtures (started once per worker that asks).
# Network namespaces: a module's tests may name their hosts with the module's own fixed prefix
# ("pfv", "pfhi"), which two of its tests on two workers would both create; each module is its own
# group (`netns:<path>`), and two modules' networks (other prefixes) run side by side: every global
# name carries its prefix and nothing has an address in the root namespace (tests/helpers/netns.py).
# PostgreSQL and the browser: one server / one chromium at a time, and
# the browser tests share the planted run's session fixture. A module with a module-scoped fixture
# of ours (one launched run whose report several tests read) is its own group: the run is made once.
# Quiet: every module with a `quiet` test (tests/helpers/quiet.py) is one group, in place of its
# netns or module group (one worker, one module after another, is the safer of the two), and its
# quiet tests run one after another (at raised priority beside the other workers; unprivileged, the
# others are drained once for all of them, not once per module: three drains cost ~180 s a run).
#
# By module path, because the scheduler (in the controller, which collects nothing) sees only test
# ids: xdist's own `xdist_group` marks cannot reach it under pytest 9 (xdist 3.8 writes the group
# into `item._nodeid`, which pytest 9 no longer reads). Every collected test is checked against
# the rules below (check_group), so a new lab module missing here fails collection, and so does a
# new module with a module- or session-scoped fixture of ours (its launched run would be made once
# per worker that runs its tests) unless SHARED_PER_WORKER names it.
QUIET_GROUP = "quiet"
MODULE_GROUPS: dict[str, str] = {
    **dict.fromkeys(("tests/launchers/test_slurm.py", "tests/launchers/test_sbatch.py",
                     "tests/launchers/test_sbatch_spares.py", "tests/launchers/test_drain.py"), "slurm"),
    **{path: f"netns:{path}" for path in (
        "tests/helpers/test_netns.py", "tests/checks/test_network_netns.py",
        "tests/launchers/test_kubeflow.py", "tests/launchers/test_mpich.py", "tests/launchers/test_mpirun.py",
        "tests/checks/test_build_netns.py", "tests/probes/test_real_node.py", "tests/steps/test_storage_netns.py",
        "tests/steps/test_storage_sshfs.py")},
    **dict.fromkeys(("tests/history/test_history_netns.py", "tests/probes/test_probes_netns.py",
                     "tests/test_api_meshes.py", "tests/probes/device/test_run_netns.py",
                     "tests/probes/device/test_run_gloo.py", "tests/probes/test_no_false_alarms.py",
                     "tests/test_api.py"), QUIET_GROUP),
    "tests/history/test_store.py": "postgres",
    **dict.fromkeys(("tests/reports/test_html_browser.py", "tests/reports/test_html_size.py",
                     "tests/reports/test_planted_run.py", "tests/reports/test_history_browser.py"), "browser"),
    **{path: f"module:{path}" for path in (
        "tests/checks/test_config_multirank.py", "tests/checks/test_health_multirank.py",
        "tests/checks/test_fabric_multirank.py", "tests/probes/test_nccl_account_run.py",
        "tests/reports/test_slow_rank_views.py",
        "tests/commands/test_history.py", "tests/history/test_run_history.py")},
}
# Modules whose module-scoped fixture is cheap to make once per worker (test_channel_fuzz's imports torch),
# so their tests stay spread over the workers; any other module with a shared fixture must be in
# MODULE_GROUPS (until issue 44 it was allowed out, and three modules' launched runs were each made on
# two or three workers: test_nccl_account_run's three 4-rank runs twice, test_fabric_multirank's thrice).
SHARED_PER_WORKER = frozenset({"tests/fuzz/test_channel_fuzz.py"})

# What puts a test in a lab group: (group, its fixtures, its markers); "netns" is its module's own.
LAB_GROUPS: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = (
    ("slurm", frozenset({"slurm_cluster", "slurm_netns"}), frozenset({"slurm"})),
    ("netns", frozenset({"netns_hosts"}), frozenset({"netns"})),
    ("postgres", frozenset({"postgres"}), frozenset()),
    ("browser", frozenset({"planted_run"}), frozenset({"browser"})),
)


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """`module:<path>` for a test that uses one of the suite's own module- or session-scoped fixtures."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if not defs:
            continue
        definition = defs[-1]
        if not getattr(definition.func, "__module__", "").startswith("tests."):
            continue  # pytest's own (tmp_path_factory, ...)
        if definition.scope in ("session", "module", "package"):
            return f"module:{item.nodeid.split('::')[0]}"
    return None


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group a test's fixtures and markers call for, or None (any worker)."""
    marks = {mark.name for mark in item.iter_markers()}
    fixtures = set(item.fixturenames)
    for group, by_fixture, by_marker in LAB_GROUPS:
        if fixtures & by_fixture or marks & by_marker:
            return f"netns:{item.nodeid.split('::')[0]}" if group == "netns" else group
    return _shared_fixture_group(item)


def group_of_test_id(nodeid: str) -> str | None:
    """The group a test id runs in (MODULE_GROUPS), or None."""
    return MODULE_GROUPS.get(nodeid.split("::")[0])


def check_group(item: pytest.Item) -> str | None:
    """Why the test's module is missing from MODULE_GROUPS (or is in the wrong group), or None."""
    wanted, given = xdist_group_of(item), group_of_test_id(item.nodeid)
    module = item.nodeid.split("::")[0]
    quiet = item.get_closest_marker("quiet") is not None and Path(module).name.startswith("test_")
    if quiet and given != QUIET_GROUP:  # (tests/helpers/quiet_cases.py is the lock's own inner run)
        return f"{item.nodeid}: a quiet test; tests/conftest.py's MODULE_GROUPS must put its module in {QUIET_GROUP!r}"
    if wanted is None or wanted == given:
        return None
    if given == QUIET_GROUP and wanted.split(":")[0] in ("netns", "module"):
        return None  # one worker for the whole quiet group: its netns and shared fixtures are safe there
    if wanted.startswith("module:") and (given is not None or module in SHARED_PER_WORKER):
        # Any group runs the whole module on one worker: its shared fixture is made once. Out of every
        # group (SHARED_PER_WORKER), it is made once per worker that runs its tests, by choice.
        return None
    return f"{item.nodeid}: tests/conftest.py's MODULE_GROUPS must put its module in group {wanted!r} (has {given!r})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every lab test and every test of a shared fixture is in its module's group (else a usage error)."""
    wrong = [why for item in items if (why := check_group(item))]
    if wrong:
        raise pytest.UsageError("\n".join(wrong[:20]))
    if hasattr(config, "workerinput"):
        # Under xdist the grouped tests (the lab's, the longest chains) go out first, so that none is
        # left to run alone at the end; xdist then orders the groups by size (a stable sort), and the
        # ungrouped tests, one scope each, fill both workers after them.
        # Within the quiet group the quiet tests come first, one after another, and those that run
        # alone first of all (one drain for them). Of the ungrouped tests, those that start processes
        # go out before the in-process ones, so that the end of the run is many short tests spread
        # over the workers, not a long one left alone.
        # The tests that start processes are dealt round-robin over their modules (each module's first
        # test, then each one's second, ...): a module's tests are alike, and a module of tests that
        # mostly wait (test_keys' six runs each wait out a 15 s deadline, the probes' hang tests) dealt
        # to all the workers at once left the two cores half idle for a minute at a time.
        spawns: dict[object, bool] = {}
        items.sort(key=lambda item: (group_of_test_id(item.nodeid) is None,
                                     tuple(not mark for mark in quiet_marks(item)),
                                     not starts_processes(getattr(item, "module", None), spawns)))
        ungrouped = [i for i, item in enumerate(items) if group_of_test_id(item.nodeid) is None
                     and starts_processes(getattr(item, "module", None), spawns)]
        if ungrouped:
            items[ungrouped[0]:ungrouped[-1] + 1] = dealt_by_module(items[ungrouped[0]:ungrouped[-1] + 1])


def quiet_marks(item: pytest.Item | None) -> tuple[bool, bool]:
    """(quiet, alone) of a test's `quiet` mark (tests/helpers/quiet.py); (False, False) for none."""
    mark = item.get_closest_marker("quiet") if item is not None else None
    return mark is not None, mark is not None and bool(mark.kwargs.get("alone", False))


def dealt_by_module(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` round-robin over their modules, in the order each module first comes: every module's
    first test, then every module's second, ...; a module's own tests keep their order."""
    seen: dict[str, int] = {}
    turn = []
    for item in items:
        module = item.nodeid.split("::")[0]
        turn.append(seen.get(module, 0))
        seen[module] = turn[-1] + 1
    return [item for _, _, item in sorted(zip(turn, range(len(items)), items), key=lambda row: row[:2])]


def starts_processes(module: object, seen: dict[object, bool]) -> bool:
    """Whether a test module starts processes (ranks, the CLI, launchers): it uses tests/helpers/ranks.py
    or the subprocess module. Memoized in `seen`, per module."""
    if module is None:
        return False
    if module not in seen:
        seen[module] = any(value is subprocess or getattr(value, "__module__", None) == "tests.helpers.ranks"
                           for value in vars(module).values())
    return seen[module]


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection loaded (torch, hypothesis, every test module: the worker's heap) frozen out of the
    cyclic collector's generations: each full collection after it rescanned all of it (15 full collections,
    1 of a worker's 8.6 CPU-s over tests/model, checks and reports), and a process the test zygote forks
    from a worker no longer copies the pages a collection would touch. Reference counting still frees
    what a test drops."""
    gc.freeze()


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist must not refuse it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under --dist loadgroup: xdist's group scheduling, with the groups of MODULE_GROUPS."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of_test_id(nodeid) or nodeid  # ungrouped: any worker, test by test

    return ModuleGroups(config, log)


_LOCKS = pytest.StashKey[WorkerLocks | None]()
# PREFLIGHT_TEST_TIMELINE=FILE: each xdist worker appends one JSON line a test (when it asked for the
# quiet lock, started, ended) and the CPU seconds it cost, its processes' too where the worker may join a
# cgroup of its own (tests/helpers/cpu_account.py), to see where the suite's wall and CPU time go.
TIMELINE = os.environ.get("PREFLIGHT_TEST_TIMELINE")


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the wait is not the test's own (pytest-timeout's)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist, a `quiet` test runs at raised priority (or, unprivileged, alone): tests/helpers/quiet.py."""
    config = item.config
    if _LOCKS not in config.stash:
        worker = getattr(config, "workerinput", {}).get("workerid")
        config.stash[_LOCKS] = worker_locks(config.option.basetemp, worker)
    locks = config.stash[_LOCKS]
    if locks is None:
        return (yield)
    asked = time.time()
    (quiet, alone), (next_quiet, next_alone) = quiet_marks(item), quiet_marks(nextitem)
    worker = getattr(config, "workerinput", {}).get("workerid")
    with locks.held(quiet, next_quiet, alone=alone, next_alone=next_alone):
        started, cpu_started = time.time(), worker_cpu_s(worker) if TIMELINE else None
        try:
            return (yield)
        finally:
            if TIMELINE:  # where a worker's time went: waiting for a quiet test, or running this one
                cpu_ended = worker_cpu_s(worker)
                with open(TIMELINE, "a") as timeline:
                    timeline.write(json.dumps({"worker": worker, "test": item.nodeid, "pid": os.getpid(),
                                               "asked": asked, "started": started, "ended": time.time(),
                                               "cpu_s": None if cpu_started is None or cpu_ended is None
                                               else cpu_ended - cpu_started}) + "\n")
