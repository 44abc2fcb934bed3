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
    assert percent(1e-7) == "under 0.001%" and percent(0.0103) == "1.0%"  # two digits, the zero too


def test_counts_have_thousands_separators() -> None:
    from preflight.lib.units import count

    assert count(16_239_519) == "16,239,519"


def test_size_ranges_read_as_nccl_tests_b_e_f() -> None:
    """`--sizes 1M:64M` doubles (nccl-tests' -b 1M -e 64M -f 2), `:x4` multiplies by 4, `:+1M` adds (issue 45)."""
    import pytest

    from preflight.lib.errors import BadInput
    from preflight.options import parse_sizes

    mib = 1 << 20
    assert parse_sizes("1M:64M") == [mib << k for k in range(7)]
    assert parse_sizes("1M:64M:x4") == [mib, 4 * mib, 16 * mib, 64 * mib]
    assert parse_sizes("1M:4M:+1M") == [mib, 2 * mib, 3 * mib, 4 * mib]
    assert parse_sizes("64K,1M:2M") == [64 << 10, mib, 2 * mib]
    assert parse_sizes("1M:3M") == [mib, 2 * mib]  # the end is included when a step lands on it
    for bad, said in (("4M:1M", "ends below its start"), ("1M:2M:y", "is not a step"), ("1:64G:+1", "more than 64"),
                      ("1M:2M:x1", ">= 2"), ("1M:2M:3M:4M", "not a range"), ("-1M", "is negative")):
        with pytest.raises(BadInput, match=said):
            parse_sizes(bad)
