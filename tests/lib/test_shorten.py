"""lib/shorten.py: the one rule for shortening text: words go, numbers and units never."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.lib.shorten import ELLIPSIS, shorten

MESSAGE = "every host shares it: rank 3 copied 0.0789 GB in 0.2 s, 12.5 GB/s below its siblings' median of 41 GB/s"
HEADLINE = ("all_reduce on dp group 0 (ranks 0,1) at 64 MiB: busbw 0.983 GB/s is 1% of the expected 100 GB/s "
            "(--expect)")


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d[\d.,%]*", text)


@pytest.mark.parametrize("limit", range(10, len(MESSAGE) + 2))
def test_a_number_is_never_cut_nor_separated_from_its_unit(limit: int) -> None:
    shown = shorten(MESSAGE, limit)
    assert len(shown) <= limit
    words = shown.split(" ")
    for figure, unit in (("0.0789", "GB"), ("0.2", "s,"), ("12.5", "GB/s"), ("41", "GB/s")):
        if figure in words:
            assert words[words.index(figure) + 1] == unit, (limit, shown)
    assert set(_numbers(shown)) <= set(_numbers(MESSAGE)), shown  # no number shortened into another


def test_the_headline_keeps_the_expected_figure_where_words_can_go() -> None:
    """Issue 45: `... is 1% of the expected 10…` for an expected 100 GB/s."""
    for limit in range(80, len(HEADLINE)):
        shown = shorten(HEADLINE, limit)
        assert "0.983 GB/s" in shown and "1%" in shown and "100 GB/s" in shown, (limit, shown)
        assert ELLIPSIS in shown and len(shown) <= limit
    assert shorten(HEADLINE, len(HEADLINE)) == HEADLINE
    assert shorten(HEADLINE, len(HEADLINE) - 1).endswith("100 GB/s …")  # the words after the last number go first


@given(st.lists(st.one_of(st.from_regex(r"[a-z]{1,9}", fullmatch=True),
                          st.from_regex(r"[0-9]{1,5}(\.[0-9]{1,3})?", fullmatch=True)), min_size=1, max_size=30),
       st.integers(min_value=12, max_value=200))
def test_every_number_shown_is_one_of_the_texts(words: list[str], limit: int) -> None:
    text = " ".join(words)
    shown = shorten(text, limit)
    assert len(shown) <= limit
    if len(words[0]) < limit - 2:  # only a word longer than the room is cut inside
        assert set(shown.replace(ELLIPSIS, " ").split()) <= set(words), (text, shown)


def test_whole_trailing_clauses_go_before_words() -> None:
    """A parenthesis or what follows a `;` goes whole, so the rest reads as a sentence, not number soup."""
    text = ("all_reduce on dp group 0 (ranks 0,1) at 4 KiB: busbw 0.000992 GB/s is 14% of its siblings' median "
            "0.00709 GB/s (threshold 80%; its fastest iteration 0.00133 < their slowest 0.005); measured again: "
            "0.001 GB/s, 12% of 0.008")
    assert shorten(text, 130) == ("all_reduce on dp group 0 (ranks 0,1) at 4 KiB: busbw 0.000992 GB/s is 14% of its "
                                  "siblings' median 0.00709 GB/s (threshold 80%; …")
    assert shorten(text, 115).endswith("median 0.00709 GB/s …")
