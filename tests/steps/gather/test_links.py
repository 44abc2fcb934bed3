"""Network facts: the IB sysfs reader (on a fake tree), NCCL/Gloo ifname rules, the chosen interface.

No InfiniBand hardware exists on a CI machine, so `fake_ib_tree` writes the kernel's sysfs
layout (/sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}) into a
temporary directory: a data-driven fake, the one place these tests do not use the real thing.
"""

from __future__ import annotations

from pathlib import Path

from preflight.model import Interface
from preflight.steps.gather.interfaces import read_interfaces
from preflight.steps.gather.links import choose_interface, parse_rate_gbps, read_ib_ports
from tests.helpers.ranks import free_port, read_json, run_cli


def fake_ib_tree(root: Path, ports: dict[tuple[str, int], dict[str, str]], netdevs: dict[str, list[str]]) -> str:
    """Write a fake /sys/class/infiniband tree under root; returns the sysfs root to pass."""
    for (device, port), files in ports.items():
        folder = root / "class" / "infiniband" / device / "ports" / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text + "\n")
    for device, names in netdevs.items():
        for name in names:
            (root / "class" / "infiniband" / device / "device" / "net" / name).mkdir(parents=True, exist_ok=True)
    return str(root)


ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}


def test_ib_ports_from_sysfs_tree(tmp_path: Path) -> None:
    root = fake_ib_tree(tmp_path, {
        ("mlx5_0", 1): ACTIVE,
        ("mlx5_1", 1): {**ACTIVE, "state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)"},
    }, {"mlx5_0": ["ib0"], "mlx5_1": ["ib1"]})
    ports = read_ib_ports(root)
    assert [(p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.netdevs) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, ["ib0"]),
        ("mlx5_1", 1, "DOWN", "Polling", 10.0, ["ib1"]),
    ]
    assert read_ib_ports(str(tmp_path / "nothing")) == []


def test_rate_parsing() -> None:
    assert parse_rate_gbps("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate_gbps("garbage") is None


def _iface(name: str, up: bool = True, addresses: tuple[str, ...] = ("10.0.0.1",)) -> Interface:
    return Interface(name, up=up, mtu=1500, addresses=list(addresses))


def test_chosen_interface_precedence() -> None:
    interfaces = [_iface("lo", addresses=("127.0.0.1",)), _iface("eth0", addresses=("10.1.0.1",)),
                  _iface("ib0", addresses=("10.2.0.1",))]
    assert choose_interface(interfaces, {"NCCL_SOCKET_IFNAME": "eth"}, "127.0.0.1").name == "eth0"
    assert choose_interface(interfaces, {"GLOO_SOCKET_IFNAME": "nosuch0"}, "127.0.0.1").name == ""
    assert choose_interface(interfaces, {"NCCL_SOCKET_IFNAME": "ib0,,eth0"}, "127.0.0.1").name == ""
    nccl_first = {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "ib0"}
    assert choose_interface(interfaces, nccl_first, "127.0.0.1").source == "NCCL_SOCKET_IFNAME==eth0"
    assert choose_interface(interfaces, {}, "127.0.0.1").name == "ib0"
    down_ib = [interfaces[0], interfaces[1], _iface("ib0", up=False)]
    # No UP ib*: the route to MASTER_ADDR decides (the real routing table: loopback for 127.0.0.1).
    assert choose_interface(down_ib, {}, "127.0.0.1").name == "lo"
    assert any(i.name == "lo" and i.up and "127.0.0.1" in i.addresses for i in read_interfaces())


def test_a_down_ib_port_fails_a_real_run(tmp_path: Path) -> None:
    root = fake_ib_tree(tmp_path / "sys", {
        ("mlx5_0", 1): ACTIVE,
        ("mlx5_1", 1): {**ACTIVE, "state": "2: INIT", "phys_state": "5: LinkUp"},
    }, {"mlx5_0": ["ib0"]})
    report = tmp_path / "r.json"
    done = run_cli(["run", "--skip", "probe", "--sysfs-root", root, "--json", str(report)],
                   env={"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    found = [f for f in read_json(report)["findings"] if f["check_id"] == "NET002"]
    assert done.returncode == 3 and len(found) == 1 and "mlx5_1 port 1" in found[0]["message"], done.stdout
    assert "INIT" in found[0]["message"]


def test_a_link_still_training_is_read_again_before_it_counts(tmp_path: Path) -> None:
    """The sysfs fake's port comes up while it is read again (the test's sleep is where time passes):
    settled, no NET002. One that stays in Polling is kept as read, after the whole grace."""
    from preflight.checks.nic_health import ib_port_not_active
    from preflight.registry import CheckContext
    from preflight.steps.gather.links import settle_ports
    from tests.helpers.facts import rank_facts

    training = {**ACTIVE, "state": "2: INIT", "phys_state": "4: PortConfigurationTraining"}
    root = fake_ib_tree(tmp_path, {("mlx5_0", 1): ACTIVE, ("mlx5_1", 1): training},
                        {"mlx5_0": ["ib0"], "mlx5_1": ["ib1"]})
    port = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1"
    steps = iter([("2: INIT", "5: LinkUp"), ("4: ACTIVE", "5: LinkUp")])

    def link_comes_up(_: float) -> None:
        state, phys = next(steps)
        (port / "state").write_text(state + "\n")
        (port / "phys_state").write_text(phys + "\n")

    ports = settle_ports(root, read_ib_ports(root), 1.0, sleep=link_comes_up)
    assert [(p.state, p.phys_state) for p in ports] == [("ACTIVE", "LinkUp")] * 2
    assert ports[1].waited_s == 0.5 and ports[0].waited_s == 0 and ports[1].netdevs == ["ib1"]

    (port / "phys_state").write_text("2: Polling\n")
    (port / "state").write_text("1: DOWN\n")
    stuck = settle_ports(root, read_ib_ports(root), 0.1, sleep=lambda _: None)
    assert (stuck[1].phys_state, stuck[1].waited_s) == ("Polling", 0.1)
    unused = settle_ports(root, read_ib_ports(root), 0.1, "mlx5_0", sleep=lambda _: None)
    assert unused[1].waited_s == 0  # NCCL_IB_HCA leaves it out: not waited for
    facts = rank_facts(0, "node01")
    facts.network.ib_ports = stuck
    (problem,) = ib_port_not_active(facts, CheckContext())
    assert problem.message == ("mlx5_1 port 1 on node01 is DOWN / Polling (want ACTIVE / LinkUp; still, after "
                               "reading it again for 0.1 s)")
