"""Every parser of user input, fuzzed: a value, or one BadInput; never another exception, never slow.

Targets: Slurm hostlists (expand, count, compress), world resolution from arbitrary launcher
environments, --mesh, --sizes, --ops, --expect, rates, and the CLI entry point itself, whose
run and launch are replaced by stubs (the parsing is what is fuzzed here, not a run).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.commands import cli
from preflight.lib.errors import BadInput
from preflight.lib.hostlist import MAX_HOSTS, compress_hostlist, count_hostlist, expand_hostlist, host_ranges
from preflight.lib.mesh_shape import parse_mesh_syntax, resolve_mesh
from preflight.lib.numbers import ascii_int
from preflight.lib.slurm_layout import parse_tasks_per_node
from preflight.options import parse_expect, parse_flops, parse_ops, parse_rate, parse_sizes, split_device_expect
from preflight.steps.launchers import resolve_world
from tests.fuzz.strategies import FUZZ, FUZZ_CLI, TRICKY, any_text

hostlist_text = st.one_of(
    any_text,
    st.lists(st.one_of(st.from_regex(r"[a-z]{1,3}(\[[0-9]{1,4}(-[0-9]{1,4})?(,[0-9]{1,4})*\]){0,3}[a-z]{0,2}",
                                     fullmatch=True), st.sampled_from(TRICKY)), max_size=6).map(",".join),
)


@FUZZ
@given(hostlist_text)
def test_hostlist_expands_or_is_bad_input(text: str) -> None:
    try:
        count = count_hostlist(text)
        hosts = expand_hostlist(text)
    except BadInput:
        return
    assert len(hosts) == count <= MAX_HOSTS
    assert all(isinstance(h, str) for h in hosts)


@FUZZ
@given(st.lists(st.one_of(st.text(max_size=12), st.from_regex(r"[a-z]{0,3}[0-9]{1,30}[a-z-]{0,3}", fullmatch=True),
                          st.integers(0, 5000).map(lambda n: "n" + "9" * n)), max_size=30))
def test_compress_never_raises_and_round_trips_plain_names(hosts: list[str]) -> None:
    text = compress_hostlist(hosts)
    host_ranges(hosts)
    simple = [h for h in hosts if h and all(c.isascii() and (c.isalnum() or c == "-") for c in h)]
    if simple:
        assert sorted(expand_hostlist(compress_hostlist(simple))) == sorted(set(simple))
    assert isinstance(text, str)


@pytest.mark.parametrize("text", ["r[0-9999]n[0-9999]", "r[0-999999]n[0-999999]", "a[0-" + "9" * 4301 + "]",
                                  "a[" + "9" * 4301 + "]", "x[0-99999999999999999]", "a[1-100000],b[1-2]"])
def test_huge_hostlists_are_refused_fast(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(BadInput):
        expand_hostlist(text)
    assert time.monotonic() - started < 0.5


LAUNCHER_VARS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                 "TORCHELASTIC_USE_AGENT_STORE", "PREFLIGHT_JOB_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK",
                 "PMIX_NAMESPACE", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_KVSNAME", "MPI_LOCALNRANKS",
                 "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_ID", "SLURM_STEP_ID",
                 "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
                 "SLURM_NODEID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_DISTRIBUTION", "SLURM_NNODES",
                 "SLURM_STEP_NUM_NODES", "SLURM_RESTART_COUNT", "SLURMD_NODENAME", "PET_NNODES", "PET_NODE_RANK",
                 "JOB_COMPLETION_INDEX", "PET_NPROC_PER_NODE", "PET_RDZV_ID", "PET_MASTER_ADDR", "PET_MASTER_PORT"]
small_int = st.integers(min_value=-2, max_value=12).map(str)
tasks_text = st.from_regex(r"[0-9]{1,3}(\(x[0-9]{1,12}\))?(,[0-9]{1,3}(\(x[0-9]{1,3}\))?){0,3}", fullmatch=True)
env_value = st.one_of(small_int, small_int, any_text, hostlist_text, tasks_text)


@FUZZ
@given(st.dictionaries(st.sampled_from(LAUNCHER_VARS), env_value, max_size=14))
def test_world_resolves_or_is_bad_input(env: dict[str, str]) -> None:
    try:
        world = resolve_world(env, host="h")
    except BadInput as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 1000
        return
    assert 0 <= world.rank < world.world_size and 0 <= world.local_rank < world.local_world_size


@pytest.mark.parametrize("env", [
    {"PMI_RANK": "0", "PMI_SIZE": "1", "PMI_JOBID": "²"},
    {"PET_NNODES": "²", "PET_NODE_RANK": "0"},
    {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "٣"},
    {"RANK": "٣", "WORLD_SIZE": "4"},
    {"RANK": "0", "WORLD_SIZE": "9" * 4301},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "r[0-9999]n[0-9999]"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "r[0-999999]n[0-999999]"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "a", "SLURM_TASKS_PER_NODE": "2(x999999999)"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "9" * 5000, "SLURM_JOB_NODELIST": "a"},
    {"RANK": "0", "WORLD_SIZE": "1", "PREFLIGHT_JOB_ID": "j" * 50_000_000},
    {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h" * 50_000_000},
])
def test_known_bad_launcher_values_end_fast(env: dict[str, str]) -> None:
    started = time.monotonic()
    try:
        resolve_world(env, host="h")
    except BadInput as exc:
        assert len(str(exc)) < 400
    assert time.monotonic() - started < 0.5


def test_derived_port_of_a_long_numeric_job_id_is_clean() -> None:
    world = resolve_world({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "9" * 200,
                           "SLURM_JOB_NODELIST": "a"}, host="h")
    assert 12000 <= world.master_port < 32000


@FUZZ
@given(st.one_of(any_text, st.from_regex(r"[0-9]{1,12}(\(x[0-9]{1,14}\))?(,[0-9]{1,3}){0,3}", fullmatch=True)))
def test_tasks_per_node(text: str) -> None:
    try:
        counts = parse_tasks_per_node(text)
    except BadInput:
        return
    assert len(counts) <= MAX_HOSTS


mesh_text = st.one_of(any_text, st.lists(st.from_regex(r"[a-z_]{1,4}([0-9]{1,25}|\*|-1)", fullmatch=True),
                                         max_size=5).map(",".join))


@FUZZ
@given(mesh_text, st.integers(min_value=1, max_value=2**20))
def test_mesh_parses_or_is_bad_input(text: str, world_size: int) -> None:
    try:
        parse_mesh_syntax(text)
        dims = resolve_mesh(text, world_size)
    except BadInput:
        return
    product = 1
    for dim in dims:
        product *= dim.size
    assert not dims or product == world_size


@FUZZ
@given(st.one_of(any_text, st.lists(st.from_regex(r"[0-9.]{1,30}\s?(K|M|G|KiB|MiB|GiB|B|)", fullmatch=True),
                                    max_size=4).map(",".join)))
def test_sizes_parse_or_are_bad_input(text: str) -> None:
    try:
        sizes = parse_sizes(text)
    except BadInput:
        return
    assert all(isinstance(s, int) and 0 < s <= 2**36 for s in sizes)


@FUZZ
@given(any_text)
def test_ops_parse_or_are_bad_input(text: str) -> None:
    try:
        parse_ops(text)
    except BadInput:
        pass


@FUZZ
@given(st.one_of(any_text, st.from_regex(r"[a-z]{1,3}=[0-9.]{1,30}(GB/s|Gb/s|MB/s|GiB/s|Gbps|)", fullmatch=True)))
def test_expect_and_rates_parse_or_are_bad_input(text: str) -> None:
    for parse in (parse_expect, parse_rate):
        try:
            result = parse(text)
        except BadInput:
            continue
        values = result.values() if isinstance(result, dict) else [result]
        assert all(0 < v <= 1e6 for v in values)


@FUZZ
@given(st.one_of(any_text, st.from_regex(
    r"(gemm|hbm|h2d|tp)=[0-9.]{1,30}(TFLOPS|GFLOPS|TB/s|GB/s|)(,[a-z]{2,4}=[0-9]{1,4})?", fullmatch=True)))
def test_device_expect_parses_or_is_bad_input(text: str) -> None:
    try:
        rest, device = split_device_expect(text)
        flops = parse_flops(text)
    except BadInput:
        return
    assert all(0 < v <= 1e6 for v in device.values()) and 0 < flops <= 1e6 and isinstance(rest, str)


def test_device_expect_is_split_from_the_dimensions() -> None:
    rest, device = split_device_expect("tp=300GB/s,gemm=700TFLOPS,hbm=2.8TB/s,h2d=50GB/s,gemm_tf32=0.4PFLOPS")
    assert rest == "tp=300GB/s" and device == {"gemm": 700.0, "copy": 2800.0, "h2d": 50.0, "gemm_tf32": 400.0}
    with pytest.raises(BadInput):
        split_device_expect("gemm=700GB/s")


@pytest.mark.parametrize("call", [
    lambda: parse_sizes("7" * 5000), lambda: parse_sizes("7" * 300), lambda: parse_expect("tp=" + "9" * 400),
    lambda: parse_mesh_syntax("tp" + "9" * 4301), lambda: parse_mesh_syntax("tp99999999999"),
    lambda: ascii_int("²", "X"), lambda: ascii_int("٣", "X"), lambda: ascii_int("9" * 4301, "X"),
])
def test_known_bad_values_are_one_bad_input(call) -> None:
    with pytest.raises(BadInput):
        call()


FLAGS = ["--timeout", "--check-timeout", "--probe-timeout", "--straggler-ratio", "--warmup", "--iters", "--mesh",
         "--sizes", "--ops", "--expect", "--silence", "--only", "--skip", "--backend", "--run-id", "-n"]
argv_strategy = st.one_of(
    st.lists(st.one_of(st.sampled_from([*FLAGS, "run", "launch", "list", "explain", "report", "--strict"]), any_text),
             max_size=6),
    st.lists(st.tuples(st.sampled_from(FLAGS), any_text), max_size=4).map(lambda pairs: [x for p in pairs for x in p]),
)


@pytest.fixture
def stub_run(monkeypatch: pytest.MonkeyPatch) -> list:
    """The run and launch entry points replaced by stubs that record the options they were given."""
    import preflight.commands.launch
    import preflight.commands.rerender
    import preflight.runner

    calls: list = []
    monkeypatch.setattr(preflight.runner, "run", lambda options: calls.append(options) or 0)
    monkeypatch.setattr(preflight.commands.launch, "launch",
                        lambda n, argv, options, start_method: calls.append(options) or 0)
    monkeypatch.setattr(preflight.commands.rerender, "rerender", lambda args: 0)
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PET_NNODES"):
        monkeypatch.delenv(name, raising=False)
    return calls


@FUZZ_CLI
@given(argv=argv_strategy)
def test_cli_returns_a_code_and_never_raises(stub_run: list, argv: list[str], capsys) -> None:
    argv = [a.replace("\x00", "") for a in argv if a not in ("-h", "--help", "--version")]
    code = cli.main(argv)
    capsys.readouterr()
    assert code in (0, 1, 2, 3, 4)
