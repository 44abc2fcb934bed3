"""Which probes `--only` / `--skip` leave on: the device probes are part of step 8."""

from __future__ import annotations

import pytest

from preflight.options import RunOptions


@pytest.mark.parametrize(("only", "skip", "collectives", "devices"), [
    ([], [], True, True),
    ([], ["probe"], False, False),  # the whole step, as before the device probes existed
    ([], ["gpu-probe"], True, False),
    (["gpu-probe"], [], False, True),
    (["probe"], [], True, True),
    (["env"], [], False, False),
])
def test_only_and_skip_select_the_probes(only: list[str], skip: list[str], collectives: bool, devices: bool) -> None:
    options = RunOptions(only=only, skip=skip)
    assert (options.probes_enabled(), options.device_probes_enabled()) == (collectives, devices)
    assert options.any_probes() == (collectives or devices)
