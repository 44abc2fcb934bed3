"""lib/units.py: byte counts, and text clipped between words without cutting a figure from its unit."""

from __future__ import annotations

import pytest

from preflight.lib.units import clip, human_bytes

MESSAGE = "every host shares it: rank 3 copied 0.0789 GB in 0.2 s, 12.5 GB/s below its siblings' median of 41 GB/s"


@pytest.mark.parametrize("limit", range(10, len(MESSAGE) + 2))
def test_clip_never_separates_a_number_from_its_unit(limit: int) -> None:
    shown = clip(MESSAGE, limit)
    assert len(shown) <= limit
    if shown != MESSAGE:
        assert shown.endswith(" …") and MESSAGE.startswith(shown[:-2])
    body = shown.removesuffix(" …")
    for figure, unit in (("0.0789", "GB"), ("0.2", "s"), ("12.5", "GB/s"), ("41", "GB/s")):
        if figure in body.split():
            assert f"{figure} {unit}" in body, (limit, shown)


def test_human_bytes() -> None:
    assert (human_bytes(1 << 20), human_bytes(1536), human_bytes(512)) == ("1 MiB", "1.5 KiB", "512 B")
