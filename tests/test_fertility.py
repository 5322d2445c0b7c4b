"""CONSTANT and GUIDED fertilities on hand-made alignments."""

from __future__ import annotations

import pytest

from lit_structattn.datamodules.fertility import (
    constant_fertilities,
    guided_fertility_table,
    lookup_fertilities,
)


def test_constant():
    assert constant_fertilities([["a", "b"], ["c"]], 2) == [[2.0, 2.0], [2.0]]
    with pytest.raises(ValueError, match="> 0"):
        constant_fertilities([["a"]], 0)


def test_guided_takes_the_largest_aligned_count_per_word_type():
    sources = [["das", "Haus", "ist", "klein"], ["das", "Haus"]]
    links = [
        {(0, 0), (1, 1), (1, 2), (3, 3)},  # Haus -> 2 words, ist -> none, klein -> 1
        {(0, 0), (0, 1), (0, 2), (1, 3)},  # das -> 3 words
    ]
    table = guided_fertility_table(sources, links)
    assert table == {"das": 3, "Haus": 2, "ist": 1, "klein": 1}
    assert lookup_fertilities([["das", "Boot"]], table) == [[3.0, 1.0]]
    with pytest.raises(ValueError, match="2 source sentences but 1 link sets"):
        guided_fertility_table(sources, links[:1])
