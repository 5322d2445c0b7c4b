"""Word alignments from a real aligner (eflomal, Östling & Tiedemann 2016): the source of the
GUIDED and PREDICTED fertilities and of the DROP score (Malaviya et al. 2018 used fast_align).

:func:`align` aligns a list of tokenized sentence pairs in one run and returns, per pair, the
set of ``(source index, target index)`` links of the source-to-target direction. To align test
pairs as well as possible, align them together with the training corpus (as the authors did).
:func:`cached_links` keeps the links of a corpus in a file, computed once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from lit_structattn.common.optional import optional_import

from .files import atomic_path

Links = set[tuple[int, int]]


def align(
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]], iterations: int | None = None
) -> list[Links]:
    """Source-to-target word links of every ``(source tokens, target tokens)`` pair.

    Args:
        pairs: tokenized sentence pairs; empty sides are allowed (no links).
        iterations: eflomal's iteration count (None: its default, scaled to the corpus size).
    Returns:
        one set of ``(i, j)`` links per pair (``i`` indexes the source tokens).
    """
    eflomal = optional_import("eflomal", "translation")

    if not pairs:
        return []
    source = [" ".join(src) + "\n" for src, _ in pairs]
    target = [" ".join(tgt) + "\n" for _, tgt in pairs]
    aligner = eflomal.Aligner(n_iterations=iterations)
    with tempfile.TemporaryDirectory() as folder:
        links_file = Path(folder) / "forward.links"
        aligner.align(source, target, links_filename_fwd=str(links_file), quiet=True)
        lines = links_file.read_text(encoding="utf-8").split("\n")
    links = []
    for line in lines[: len(pairs)]:
        pairs_of_line = (item.split("-") for item in line.split())
        links.append({(int(i), int(j)) for i, j in pairs_of_line})
    return links


def cached_links(path: Path, pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
                 iterations: int | None = None) -> list[Links]:
    """:func:`align` of ``pairs``, kept in ``path`` (one line of ``i-j`` links per pair):
    computed and written (whole, never half) when the file is missing, read otherwise."""
    if not path.is_file():
        links = align(pairs, iterations)
        with atomic_path(path) as partial:
            partial.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(sentence)) + "\n"
                                       for sentence in links))
    lines = path.read_text().split("\n")[: len(pairs)]
    return [{tuple(map(int, link.split("-"))) for link in line.split()} for line in lines]
