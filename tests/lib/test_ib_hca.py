"""NCCL_IB_HCA's rules, parsed once (preflight/lib/ib_hca.py)."""

from __future__ import annotations

from preflight.lib.ib_hca import HcaFilter


def test_unset_or_empty_is_no_filter() -> None:
    assert HcaFilter.parse(None) is None and HcaFilter.parse("  ") is None


def test_prefixes_ports_exact_names_and_exclusion() -> None:
    prefix = HcaFilter.parse("mlx5")
    assert prefix.allows("mlx5_0", 1) and prefix.allows("mlx5_11", 2) and not prefix.allows("bnxt_re0", 1)
    port = HcaFilter.parse("mlx5_0:1,mlx5_1")
    assert port.allows("mlx5_0", 1) and not port.allows("mlx5_0", 2) and port.allows("mlx5_1", 2)
    exact = HcaFilter.parse("=mlx5_1")
    assert exact.allows("mlx5_1", 1) and not exact.allows("mlx5_10", 1)
    excluded = HcaFilter.parse("^mlx5_2")
    assert excluded.allows("mlx5_0", 1) and not excluded.allows("mlx5_2", 1)
    both = HcaFilter.parse("^=mlx5_1:1")
    assert not both.allows("mlx5_1", 1) and both.allows("mlx5_1", 2) and both.allows("mlx5_10", 1)
