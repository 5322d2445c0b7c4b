"""Fertilities of source words (Malaviya et al. 2018, §4): how much attention each source word
may receive over a whole translation when the decoder's attention is constrained
(``upper_t = f - cumulative attention``).

- CONSTANT: the same ``f`` for every word (:func:`constant_fertilities`).
- GUIDED: per source-vocabulary word, the largest number of target words it was aligned to in
  the training data, at least 1; unseen words get 1 (:func:`guided_fertility_table`,
  :func:`lookup_fertilities`). No slack, as the authors.

The ``<SINK>`` token appended to every source gets an unbounded fertility (its bound never
binds); that is the caller's job (it knows the source length).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

Links = Iterable[tuple[int, int]]


def constant_fertilities(sources: Sequence[Sequence[str]], fertility: float) -> list[list[float]]:
    """``fertility`` for every word of every source sentence; ``ValueError`` unless > 0."""
    if fertility <= 0:
        raise ValueError(f"fertility must be > 0, got {fertility}")
    return [[float(fertility)] * len(source) for source in sources]


def guided_fertility_table(
    sources: Sequence[Sequence[str]], links: Sequence[Links]
) -> dict[str, int]:
    """Per source word type, the largest count of target words one of its tokens is aligned to
    (source-to-target links of the training pairs), at least 1. ``ValueError`` if ``sources``
    and ``links`` differ in length."""
    if len(sources) != len(links):
        raise ValueError(f"{len(sources)} source sentences but {len(links)} link sets")
    table: dict[str, int] = {}
    for source, sentence_links in zip(sources, links, strict=True):
        counts = Counter(i for i, _ in sentence_links)
        for position, word in enumerate(source):
            table[word] = max(table.get(word, 1), counts.get(position, 0))
    return table


def lookup_fertilities(
    sources: Sequence[Sequence[str]], table: dict[str, int], default: int = 1
) -> list[list[float]]:
    """The GUIDED fertility of every word of every source sentence (``default`` if unseen)."""
    return [[float(table.get(word, default)) for word in source] for source in sources]
