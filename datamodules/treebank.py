"""Raw sentences into words the way the tagging data was tokenised (CoNLL-2003 and the Penn
Treebank: :func:`treebank_words`; UD English-EWT, which also splits hyphens: :func:`ud_words`):
``"I live in New York."`` -> ``I live in New York .``, ``"I don't know."`` ->
``I do n't know .``. :data:`TOKENIZERS` names them for the codecs that keep one.

The method: split on whitespace, then peel punctuation off both ends of every chunk and split
English clitics off its end (:func:`treebank_words`), by the regular expressions below; the
rules are the project's own, not sacremoses', so a checkpoint tokenises the same way whatever
is installed. A word keeps the punctuation inside it (``3.5``, ``1,000``, ``Anglo-Dutch``,
``e-mail``, ``http://x.org/a``); a run of one punctuation character stays one token (``...``,
``--``, ``''``, ``!!``).

- Leading ``( [ { " ' ` $ #`` and trailing ``) ] } " ' , ; : ! ? %`` come off as tokens.
- A final ``.`` comes off, except from an abbreviation: a word with another period inside
  (``U.S.``, ``e.g.``), a single letter (``J.``) or one of :data:`ABBREVIATIONS` (``Mr.``,
  ``Fla.``), and from the number that starts a list item (``1. Michelle Freeman``, as CoNLL).
- Clitics as the Penn Treebank and UD English split them: ``n't`` (``don't`` -> ``do n't``,
  ``can't`` -> ``ca n't``, ``won't`` -> ``wo n't``) and ``'s 're 've 'll 'd 'm`` (``John's`` ->
  ``John 's``), with ``'`` or ``’``.

The contract: already-tokenised text comes back unchanged (``"John Smith said in Paris ."``,
``"do n't"``, ``"'s"``, ``"U.S."``), so whitespace-split input reads the same with or without
tokenising (tested on the shipped treebank's words).
"""

from __future__ import annotations

import re

#: words whose final period is part of them (lower case, without the period)
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr inc ltd co corp vs etc jan feb mar apr jun jul aug sep sept "
    "oct nov dec mon tue tues wed thu thur fri sat sun no gen gov sen rep rev capt col lt mt "
    "ft ala ariz ark calif colo conn del fla ga ill ind kan ky la md mass mich minn miss mo "
    "mont neb nev okla ore pa tenn tex va vt wash wis wyo".split())

#: the number of a list item (``1. Michelle Freeman``), which keeps its period
_LIST_NUMBER = re.compile(r"^\d+\.$")
_HYPHEN = re.compile(r"(?<=\w)(-)(?=\w)")
_LEADING = "([{\"'`$#"
_TRAILING = ")]}\"',;:!?%"
_CLITIC = re.compile(r"(?i)^(?P<stem>.+?)(?P<clitic>n['’]t|['’](?:s|re|ve|ll|d|m))$")
_RUN_AT_START, _RUN_AT_END = re.compile(r"^(.)\1*"), re.compile(r"(.)\1*$")
#: clitics that are tokens already (``n't``, ``'s``): never split again
_CLITIC_TOKEN = re.compile(r"(?i)^(?:n['’]t|['’](?:s|re|ve|ll|d|m))$")


def treebank_words(text: str) -> tuple[str, ...]:
    """The words of a raw sentence ``text`` as CoNLL-2003 and the Penn Treebank split them
    (see the module docstring); ``()`` for a blank one."""
    chunks = text.split()
    if len(chunks) > 1 and _LIST_NUMBER.match(chunks[0]):
        return (chunks[0], *treebank_words(" ".join(chunks[1:])))
    return tuple(word for chunk in chunks for word in _chunk_words(chunk))


def ud_words(text: str) -> tuple[str, ...]:
    """The words of a raw sentence ``text`` as UD English-EWT splits them: :func:`treebank_words`
    with the hyphens between letters or digits split off (``15-year`` -> ``15 - year``)."""
    return tuple(part for word in treebank_words(text) for part in _HYPHEN.split(word) if part)


#: how a tagger's codec splits raw text, by the name its state keeps (``whitespace``: as given)
TOKENIZERS = {"treebank": treebank_words, "ud": ud_words,
              "whitespace": lambda text: tuple(text.split())}


def _chunk_words(chunk: str) -> list[str]:
    """The words of one whitespace-free ``chunk``: leading punctuation, the word, its clitic,
    trailing punctuation."""
    chunk, leading = _peel(chunk, _LEADING, from_end=False)
    trailing: list[str] = []
    while chunk:
        core, run = _peel(chunk, _TRAILING, from_end=True)
        if not run:
            core, run = _periods(chunk)
        if not run:
            break
        trailing = run + trailing
        chunk = core
    return leading + _clitic_split(chunk) + trailing


def _peel(chunk: str, characters: str, from_end: bool) -> tuple[str, list[str]]:
    """``chunk`` without the runs of ``characters`` at its start (or end), and those runs as
    tokens (a run: repeats of one character); what is left of a chunk is never empty, and a
    clitic token (``'s``) is left whole."""
    edge_run = _RUN_AT_END if from_end else _RUN_AT_START
    runs: list[str] = []
    while not _CLITIC_TOKEN.match(chunk):
        run = edge_run.search(chunk)[0]
        if run[0] not in characters or run == chunk:
            break
        runs = [run, *runs] if from_end else [*runs, run]
        chunk = chunk[: -len(run)] if from_end else chunk[len(run):]
    return chunk, runs


def _periods(word: str) -> tuple[str, list[str]]:
    """``word`` without the periods that end it as a token of their own (``York.``,
    ``so...``), and them; an abbreviation's period (``U.S.``, ``J.``, ``Mr.``) and a word of
    periods only (``...``) stay."""
    stem = word.rstrip(".")
    if not stem or stem == word:
        return word, []
    dots = word[len(stem):]
    abbreviation = dots == "." and (
        "." in stem or (len(stem) == 1 and stem.isalpha()) or stem.lower() in ABBREVIATIONS)
    return (word, []) if abbreviation else (stem, [dots])


def _clitic_split(word: str) -> list[str]:
    """``word`` with an English clitic split off its end (``don't`` -> ``do n't``)."""
    if not word:
        return []
    found = _CLITIC.match(word)
    if found is None or not found["stem"][-1].isalpha():
        return [word]
    return [found["stem"], found["clitic"]]
