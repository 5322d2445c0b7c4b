"""A tiny generated German-English corpus for the translation tests."""

from __future__ import annotations

import gzip
import random

NOUNS = {"Hund": "dog", "Katze": "cat", "Mann": "man", "Frau": "woman", "Kind": "child"}
VERBS = {"läuft": "runs", "schläft": "sleeps", "spielt": "plays", "isst": "eats"}


def write_corpus(folder, pairs_per_split=(300, 40, 40), gz=True, seed=0):
    """A tiny German-English corpus of 'Der X Y im Park.' sentences in ``folder`` (created)."""
    folder.mkdir(exist_ok=True)
    rng = random.Random(seed)
    for prefix, count in zip(("train", "val", "test"), pairs_per_split, strict=True):
        de, en = [], []
        for _ in range(count):
            noun, verb = rng.choice(list(NOUNS)), rng.choice(list(VERBS))
            repeat = rng.randint(1, 3)
            de.append(f"Der {noun} {verb} " + "und " .join(["im Park"] * repeat) + ".")
            en.append(f"The {NOUNS[noun]} {VERBS[verb]} " + "and ".join(["in the park"] * repeat)
                      + ".")
        for lang, lines in (("de", de), ("en", en)):
            text = "\n".join(lines) + "\n"
            if gz:
                with gzip.open(folder / f"{prefix}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)
            else:
                (folder / f"{prefix}.{lang}").write_text(text, encoding="utf-8")
