# ruff: noqa: E501  (the fixed texts are matched exactly, long lines included)
"""Mutation check for issue 10: each fix reverted in turn, the tests that claim to cover it must fail.

    .venv/bin/python .ci/revert_check.py            # every revert
    .venv/bin/python .ci/revert_check.py 2a-bind 5-timing

Each named revert undoes (or minimally breaks) one fix by exact string replacement in the
working tree, runs the tests listed for it, records which failed, and restores the files with
`git checkout`. It refuses to start when preflight/ has uncommitted changes (they
would be lost). A revert whose tests all pass is a fix no test guards: exit 1. The results
are tabled in docs/testing.md ("Issue 10: each fix and the test that fails without it").
Never commit a tree with a revert applied.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
R: dict[str, list[tuple[str, str, str]]] = {}


def rev(name: str, path: str, old: str, new: str) -> None:
    """Register one replacement of revert `name` (a revert may need several)."""
    R.setdefault(name, []).append((path, old, new))


# 1a: no compatibility table: only the newest name
rev("1a-compat", "preflight/probes/ops.py",
    '"all_gather": ("all_gather_single", "all_gather_into_tensor"),\n    "reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),',
    '"all_gather": ("all_gather_single",),\n    "reduce_scatter": ("reduce_scatter_single",),')
# 1b: no catch-all in run_steps
rev("1b-catchall", "preflight/probes/session.py",
    '''        except Exception as exc:
            return records, Status("error", index, phase, f"{op}: {type(exc).__name__}: {one_line(exc)}",
                                   time.monotonic() - started)
''', '')
# 2a: old binding: has a GPU iff device_count() > LOCAL_RANK, set_device(LOCAL_RANK)
rev("2a-bind", "preflight/probes/session.py",
    '''    if count == 1:
        index = 0
    elif count >= world.local_world_size and world.local_rank < count:
        index = world.local_rank
    else:
        raise BindError(''',
    '''    if count > world.local_rank:
        index = world.local_rank
    else:
        raise BindError(''')
# 2b: no device_id
rev("2b-device-id", "preflight/probes/session.py",
    '''    if backend == "nccl" and bound is not None and "device_id" in inspect.signature(init).parameters:''',
    '''    if False:''')
# 3a: probe NCCL env: old (async error handling 1, user's blocking wait kept)
rev("3a-nccl-env", "preflight/probes/session.py",
    '''    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
    "TORCH_NCCL_BLOCKING_WAIT": "0",''',
    '''    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",''')
rev("3a-nccl-env", "preflight/probes/session.py",
    '''PROBE_NCCL_UNSET = ("NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT")''', '''PROBE_NCCL_UNSET = ()''')
# 5: per-iteration event pair with a host poll between iterations (the old timed_call, looped)
rev("5-timing", "preflight/probes/timing.py",
    '''    events = [cuda.Event(enable_timing=True) for _ in range(iters + 1 if per_iteration else 2)]
    events[0].record(stream)
    for i in range(iters):
        for work in start():
            if work is not None:
                work.wait()  # the current stream waits for the collective; the host does not
        if per_iteration:
            events[i + 1].record(stream)
    events[-1].record(stream)
    next_check = time.monotonic() + SLICE_S
    while not events[-1].query():  # the one synchronisation, bounded by the deadline
        remaining(deadline)
        if time.monotonic() >= next_check:
            check_abort()
            next_check = time.monotonic() + SLICE_S
        time.sleep(0.0002)
    if per_iteration:
        return [a.elapsed_time(b) / 1e3 for a, b in pairwise(events)]
    return [events[0].elapsed_time(events[-1]) / 1e3 / iters]''',
    '''    times = []
    for _ in range(iters):
        begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        begin.record()
        for work in start():
            if work is not None:
                work.wait()
        end.record()
        while not end.query():
            remaining(deadline)
            time.sleep(0.0002)
        times.append(begin.elapsed_time(end) / 1e3)
    return times if per_iteration else [sum(times) / len(times)]''')
# 6a: the enum stored as the generation
rev("6a-enum", "preflight/steps/gather/gpus.py",
    "NVLINK_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}",
    "NVLINK_GENERATION = {i: i for i in range(1, 9)}")
# 6b: no per-device/per-field catching
rev("6b-perfield", "preflight/steps/gather/gpus.py",
    '''    try:
        return read()
    except nvml.NVMLError as exc:
        errors.append(f"{name}: {exc}")
        return default''', '''    return read()''')
# 6c: device by LOCAL_RANK (old nvlink_of)
rev("6c-match", "preflight/probes/nominal.py",
    '''    if device_id:
        for gpu in facts.gpus:''',
    '''    if facts.gpus:
        return facts.gpus[facts.world.local_rank] if facts.world.local_rank < len(facts.gpus) else facts.gpus[0]
    if device_id:
        for gpu in facts.gpus:''')
# 7b: cross-host nominal from the socket interface even on NCCL
rev("7b-rdma", "preflight/probes/nominal.py",
    '''    if backend == "nccl":
        ports = nccl_ports(facts)''', '''    if False:
        ports = nccl_ports(facts)''')
# 7a: localization on the control group (gloo, CPU), whatever the session's backend
rev("7a-localize", "preflight/probes/pairwise.py",
    '''    group = control if group is None else group
    dtype = dtype or (torch.bfloat16 if device == "cuda" else torch.float32)''',
    '''    group, device, cuda = control, "cpu", None
    dtype = torch.float32''')
# 8: C++ level: FATAL for the whole run (old: TORCH_CPP_LOG_LEVEL around the import)
rev("8-cpplog", "preflight/lib/torch_import.py",
    '''    import torch.distributed  # noqa: F401
''', '''    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch.distributed  # noqa: F401
''')

rev("3b-exit", "preflight/runner.py",
    "    if record.probes is not None and record.probes.left_pending:", "    if False:")
rev("3d-grace", "preflight/probes/collect.py",
    "grace_until: float | None = time.monotonic() + EARLY_GRACE_S if early else None",
    "grace_until: float | None = None")
rev("3d-grace", "preflight/probes/collect.py",
    "        if grace_until is None and got.stopped():", "        if not early and grace_until is None and got.stopped():")
rev("2c-bw010", "preflight/probes/orchestrate.py",
    """    if requested != "auto" or outcome.backend != "gloo" or not gpu_hosts:
        return []""", """    return []""")
rev("4-connect", "preflight/probes/session.py",
    """    group, ranks, _ = session.groups[dim]
    me, n = ranks.index(session.world.rank), len(ranks)
    elem = 2""", """    return
    group, ranks, _ = session.groups[dim]
    me, n = ranks.index(session.world.rank), len(ranks)
    elem = 2""")

rev("3a2-monitor", "preflight/probes/session.py", """    "TORCH_NCCL_ENABLE_MONITORING": "0",
""", "")

# 31a (issue 31): the session's device is a bare "cuda" (each thread's current device), not the bound GPU
rev("31a-explicit-device", "preflight/probes/session.py",
    '''            device = torch.device("cuda", bound.index)''', '''            device = torch.device("cuda")''')
# 31b: the threads that touch the GPU do not make the bound GPU their current device first
rev("31b-thread-device", "preflight/probes/session.py",
    '''            (self.cuda or _torch_cuda()).set_device(self.device.index)''', '''            pass''')
# 31c: the timing loop's events on the thread's current stream, not the bound GPU's
rev("31c-event-stream", "preflight/probes/timing.py",
    '''    stream = cuda.current_stream(device)''', '''    stream = None''')
# 31d: the job's device read inside preflight's helper thread (always 0), not in the trainer's
rev("31d-adopt-thread", "preflight/api.py",
    '''        index = int(torch.cuda.current_device())  # here''', '''        index = 0  # here''')

# 2d: the report's backend is what was asked ("auto"), and no rank's bound device reaches rank 0
rev("2d-report", "preflight/probes/orchestrate.py",
    "    outcome.backend, outcome.backend_reason = choice.backend, choice.reason",
    "    outcome.backend, outcome.backend_reason = options.probes.backend, choice.reason")
rev("2e-devices", "preflight/probes/session.py",
    """    store.set(f"dev/{world.rank}", json.dumps(""", """    0 and store.set(f"dev/{world.rank}", json.dumps(""")
# 5b: gloo timed per call (a list of per-iteration figures), not one figure over the whole loop
rev("5b-cpu", "preflight/probes/timing.py",
    """        if per_iteration:
            return [b - a for a, b in pairwise(marks)]
        return [(marks[-1] - marks[0]) / iters]""", """        return [b - a for a, b in pairwise(marks)]""")

# 3c: NCCL001/NCCL002 texts as before the fix (mode 3 "keeps the process")
rev("3c-texts", "preflight/checks/nccl.py",
    """hint="Unset TORCH_NCCL_ASYNC_ERROR_HANDLING or set it to 3 (the default: a timed-out collective "
    "kills the process, so the launcher ends the job); 2 aborts the communicator but keeps the process, "
    "only for code that handles the error itself. With 0 a stuck collective hangs the job until the "
    "scheduler kills it.",""", """hint="Unset TORCH_NCCL_ASYNC_ERROR_HANDLING or set it to 3 (the default): with 0 a stuck "
    "collective hangs the job until the scheduler kills it.",""")
rev("3c-texts", "preflight/checks/nccl.py",
    """hint="Set TORCH_NCCL_ASYNC_ERROR_HANDLING to 0-3, or unset it (3, the default, kills the process "
    "on a timeout; 2 keeps it).",""", """hint="Set TORCH_NCCL_ASYNC_ERROR_HANDLING to 0-3, or unset it (3 is the default).",""")

TESTS: dict[str, list[str]] = {'1a-compat': ['tests/probes/test_probes_gloo.py::test_older_torch_without_the_single_tensor_names_still_runs_every_op'],
    '1b-catchall': ['tests/probes/test_probes_gloo.py::test_an_op_that_raises_typeerror_is_reported_naming_the_op_not_a_crashed_rank', 'tests/probes/test_probes_gloo.py::test_an_op_that_raises_typeerror_is_could_not_run'],
    '2a-bind': ['tests/probes/test_session_cuda.py'],
    '2b-device-id': ['tests/probes/test_session_cuda.py'],
    '2c-bw010': ['tests/probes/test_orchestrate.py'],
    '2d-report': ['tests/probes/test_probes_gloo.py::test_every_group_of_every_dimension_is_measured_and_verified[4-pp2,tp2-dims0]'],
    '2e-devices': ['tests/probes/test_probes_gloo.py::test_every_group_of_every_dimension_is_measured_and_verified[4-pp2,tp2-dims0]'],
    '3a-nccl-env': ['tests/probes/test_session_cuda.py'],
    '3a2-monitor': ['tests/probes/test_session_cuda.py'],
    '3b-exit': ['tests/probes/test_probes_hang_exit.py'],
    '3c-texts': ['tests/checks/test_nccl.py'],
    '3d-grace': ['tests/probes/test_collect.py'],
    '31a-explicit-device': ['tests/probes/test_real_node.py::test_local_rank_5_touches_only_gpu_5_in_every_thread'],
    '31b-thread-device': ['tests/probes/test_real_node.py::test_local_rank_5_touches_only_gpu_5_in_every_thread'],
    '31c-event-stream': ['tests/probes/test_real_node.py::test_local_rank_5_touches_only_gpu_5_in_every_thread'],
    '31d-adopt-thread': ['tests/test_api_device.py'],
    '4-connect': ['tests/probes/test_probes_gloo.py::test_a_rank_stuck_creating_its_groups_communicators_is_named_at_the_connect_step'],
    '5-timing': ['tests/probes/test_session_cuda.py'],
    '5b-cpu': ['tests/probes/test_session_cuda.py'],
    '6a-enum': ['tests/steps/gather/test_gpus.py'],
    '6b-perfield': ['tests/steps/gather/test_gpus.py'],
    '6c-match': ['tests/probes/test_nominal.py'],
    '7a-localize': ['tests/probes/test_pairwise.py'],
    '7b-rdma': ['tests/probes/test_nominal.py'],
    '8-cpplog': ['tests/lib/test_torch_import.py']}


def apply(name: str) -> None:
    """Apply revert `name` to the working tree (fails loudly if a fix's text has moved)."""
    for path, old, new in R[name]:
        target = ROOT / path
        text = target.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{name}: the fixed text in {path} has changed; update .ci/revert_check.py")
        target.write_text(text.replace(old, new))


def restore() -> None:
    """The committed production code back."""
    subprocess.run(["git", "-C", str(ROOT), "checkout", "-q", "--", "preflight"], check=True)


def main(names: list[str]) -> int:
    """Run each revert's tests with the revert applied; 1 when some revert fails no test."""
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "preflight"],
                           capture_output=True, text=True, check=True).stdout
    if dirty:
        print("revert_check: preflight/ has uncommitted changes; commit them first", file=sys.stderr)
        return 2
    unguarded = []
    for name in names or list(R):
        apply(name)
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
                                   *TESTS[name]], cwd=ROOT, capture_output=True, text=True)
        finally:
            restore()
        failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.MULTILINE)
        print(f"{name}: {', '.join(failed) if failed else 'NO TEST FAILED'}", flush=True)
        why = next((line for line in proc.stdout.splitlines() if line.startswith("E ")), "")
        if why:
            print(f"    first assertion: {why[1:].strip()[:200]}", flush=True)
        if not failed:
            unguarded.append(name)
    return 1 if unguarded else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
