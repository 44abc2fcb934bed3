"""A missing outside tool: a skip that says what to install on a laptop, a failure under CI=true."""

from __future__ import annotations

import pytest

from tests.helpers import tools


@pytest.fixture
def no_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools.shutil, "which", lambda name: None)
    monkeypatch.setattr(tools.os.path, "exists", lambda path: False)


def test_missing_nft_skips_saying_install_nftables(no_tools, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="install nftables"):
        tools.require_tool("nft")


def test_missing_tool_fails_in_ci_saying_what_to_install(no_tools, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="install openmpi-bin"):
        tools.require_tool("mpirun")


def test_netns_nft_checks_for_nft_before_running_it(no_tools, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import netns

    ran: list = []
    monkeypatch.setattr(netns.subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(netns, "require_tool", tools.require_tool)
    monkeypatch.setenv("CI", "true")
    host = netns.NetnsHost.__new__(netns.NetnsHost)
    with pytest.raises(pytest.fail.Exception, match="install nftables"):
        host.nft("table inet x {}")
    assert not ran  # never a bare CalledProcessError
