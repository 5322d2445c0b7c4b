"""Word alignments from a real aligner (eflomal, Östling & Tiedemann 2016): the source of the
GUIDED and PREDICTED fertilities and of the DROP score (Malaviya et al. 2018 used fast_align).

:func:`align` aligns a list of tokenized sentence pairs in one run and returns, per pair, the
set of ``(source index, target index)`` links of the source-to-target direction. To align test
pairs as well as possible, align them together with the training corpus (as the authors did).
:func:`cached_links` keeps the links of a corpus in a file, computed once; the caller names the
file by all that the links depend on (the translation data: its BPE model, a digest of the
filtered training split and the aligner's iterations, see
:meth:`~.translation.TranslationDataModule.derived_file`). :func:`read_links` reads
a links file, eflomal's own or a cached one, and checks it: one line per pair, never cut.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from lit_structattn.common.optional import optional_import

from .files import MalformedLine, atomic_path

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
        return read_links(links_file, len(pairs))


def read_links(path: Path, count: int) -> list[Links]:
    """The links of a file of ``count`` lines, one per sentence pair, of ``i-j`` items.

    Raises:
        ValueError: the file has another number of lines (naming the file and both counts).
        MalformedLine: an item is not two integers joined by ``-``.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) != count:
        raise ValueError(f"{path}: {len(lines)} lines of links for {count} sentence pairs; a "
                         "links file has one line per training pair (delete it to align again)")
    links = []
    for number, line in enumerate(lines, start=1):
        try:
            links.append({(int(i), int(j)) for i, j in (item.split("-") for item in line.split())})
        except ValueError:
            raise MalformedLine(path, number, "expected links 'i-j' (source index - target "
                                f"index) separated by spaces, got {line!r}") from None
    return links


def cached_links(path: Path, pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
                 iterations: int | None = None) -> list[Links]:
    """:func:`align` of ``pairs``, kept in ``path`` (one line of ``i-j`` links per pair):
    computed and written (whole, never half) when the file is missing, read otherwise
    (:func:`read_links`: a file of another length is a ``ValueError``)."""
    if not path.is_file():
        links = align(pairs, iterations)
        with atomic_path(path) as partial:
            partial.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(sentence)) + "\n"
                                       for sentence in links), encoding="utf-8")
    return read_links(path, len(pairs))
