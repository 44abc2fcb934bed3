"""RunOptions validates itself where it is built, for both front doors (CLI flags, preflight.check keywords)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflight.lib.errors import BadInput, BadOptionType
from preflight.options import MAX_SECONDS, RunOptions
from tests.helpers.ranks import run_cli


@pytest.mark.parametrize(("fields", "text"), [
    ({"timeout_s": "60"}, "timeout_s (--timeout) must be a number of seconds, not str"),
    ({"probe_timeout_s": True}, "probe_timeout_s (--probe-timeout) must be a number of seconds, not bool"),
    ({"skip": "probe"}, "skip (--skip) must be a list of strings, not str"),
    ({"only": [1]}, "only (--only) must be a list of strings, not list"),
    ({"strict": "yes"}, "strict (--strict) must be True or False, not str"),
    ({"iters": 2.5}, "iters (--iters) must be a whole number or None, not float"),
    ({"out_dir": 3}, "out_dir (--out-dir) must be a path or None, not int"),
    ({"json": 7}, "json (--json) must be a path or None, not int"),
])
def test_a_value_of_the_wrong_type_is_a_type_error_naming_the_option(fields: dict, text: str) -> None:
    with pytest.raises(BadOptionType) as raised:
        RunOptions.build(**fields)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, BadInput)
    assert str(raised.value) == text


@pytest.mark.parametrize(("fields", "text"), [
    ({"timeout_s": 0}, "timeout_s (--timeout)=0: must be above 0"),
    ({"check_timeout_s": float("inf")}, "check_timeout_s (--check-timeout)=inf: must be above 0"),
    ({"probe_timeout_s": float("nan")}, "probe_timeout_s (--probe-timeout)=nan"),
    ({"timeout_s": MAX_SECONDS * 2}, f"at most {MAX_SECONDS:g}"),
    ({"warmup": -1}, "warmup (--warmup)=-1: must be 0 to 1000000"),
    ({"only": ["nosuchtag"]}, "unknown tag 'nosuchtag'"),
    ({"silence": ["NOPE999"]}, "--silence 'NOPE999': no such check id"),
    ({"backend": "mpi"}, "--backend 'mpi': one of auto, nccl, gloo"),
])
def test_a_value_out_of_bounds_is_bad_input_naming_the_option(fields: dict, text: str) -> None:
    with pytest.raises(BadInput) as raised:
        RunOptions.build(**fields)
    assert not isinstance(raised.value, TypeError) and text in str(raised.value)


def test_the_text_options_must_be_text() -> None:
    with pytest.raises(BadOptionType, match=r"sizes \(--sizes\) must be a string as on the command line"):
        RunOptions.build(sizes=[1024])  # type: ignore[arg-type]


def test_good_values_come_out_typed(tmp_path: Path) -> None:
    """An int of seconds is a float, a tuple of tags a list, a Path a str: later stages see one type."""
    options = RunOptions.build(timeout_s=5, only=("probe",), silence=["net007"], out_dir=tmp_path,
                               json=tmp_path / "r.json")
    assert options.timeouts.run_s == 5.0 and isinstance(options.timeouts.run_s, float)
    assert options.only == ["probe"] and options.silence == ["NET007"]
    assert options.out_dir == str(tmp_path) and options.reports.json == str(tmp_path / "r.json")
    assert options.for_world(4).probes.world_size == 4  # validated again, unchanged


@pytest.mark.parametrize(("args", "text"), [
    (["--timeout", "inf"], "--timeout"),
    (["--only", "nosuchtag"], "unknown tag 'nosuchtag'"),
    (["--silence", "NOPE999"], "no such check id"),
])
def test_the_cli_turns_a_bad_option_into_one_line_and_exit_2(args: list[str], text: str) -> None:
    done = run_cli(["run", *args], timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1
    assert text in done.stderr.strip().splitlines()[-1]  # (argparse prints its usage before the line)


ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), st.binary(max_size=8),
                      st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=4))
FIELDS = ("timeout_s", "check_timeout_s", "probe_timeout_s", "straggler_ratio", "warmup", "iters", "strict",
          "strict_bandwidth", "only", "skip", "silence", "out_dir", "backend", "localize")


@settings(max_examples=300, deadline=2000)
@given(name=st.sampled_from(FIELDS), value=ANY_VALUE)
def test_any_value_of_any_field_is_accepted_or_bad_input_never_another_error(name: str, value: object) -> None:
    """What a caller of preflight.check may pass: it becomes a typed option or BadInput (one line), nothing else."""
    try:
        options = RunOptions.build(**{name: value})
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    assert options.for_world(2).probes.world_size == 2
