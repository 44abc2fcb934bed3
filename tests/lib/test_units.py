"""lib/units.py: byte counts as people read them."""

from __future__ import annotations

from preflight.lib.units import human_bytes


def test_human_bytes() -> None:
    assert (human_bytes(1 << 20), human_bytes(1536), human_bytes(512)) == ("1 MiB", "1.5 KiB", "512 B")


def test_sizes_have_three_significant_digits_and_never_an_exponent() -> None:
    """Issue 45: `74.5298 GiB free bytes` reads as `74.5 GiB free`."""
    assert human_bytes(80_025_714_114) == "74.5 GiB"
    assert (human_bytes(1000), human_bytes(800 << 30), human_bytes(3 << 40)) == ("1000 B", "800 GiB", "3 TiB")


def test_percentages_keep_two_significant_digits_under_ten_percent() -> None:
    """`is 0% of the expected 300 GB/s` was 0.37%: a real slowdown never rounds to 0%."""
    from preflight.lib.units import percent

    assert [percent(x) for x in (0.0037, 0.099, 0.1, 0.42, 1.5, 0.0)] == ["0.37%", "9.9%", "10%", "42%", "150%", "0%"]
    assert percent(1e-7) == "under 0.001%"


def test_counts_have_thousands_separators() -> None:
    from preflight.lib.units import count

    assert count(16_239_519) == "16,239,519"
