"""Word alignment by eflomal on a generated corpus whose true links are known."""

from __future__ import annotations

import random

from lit_structattn.datamodules.alignment import align


def test_links_recover_a_known_lexicon_under_reordering():
    rng = random.Random(0)
    lexicon = {f"q{i}": f"W{i}" for i in range(30)}
    pairs = []
    for _ in range(1500):
        source = [rng.choice(list(lexicon)) for _ in range(rng.randint(3, 8))]
        target = [lexicon[word] for word in source]
        pairs.append((source, target[::-1] if rng.random() < 0.5 else target))
    pairs.append(([], ["W1"]))  # an empty side gets no links
    links = align(pairs)
    assert len(links) == len(pairs) and links[-1] == set()
    correct = sum(all(tgt[j] == lexicon[src[i]] for i, j in found)
                  for (src, tgt), found in zip(pairs[:-1], links[:-1], strict=True))
    covered = sum(len({i for i, _ in found}) == len(src)
                  for (src, _), found in zip(pairs[:-1], links[:-1], strict=True))
    assert correct >= 0.99 * (len(pairs) - 1) and covered >= 0.95 * (len(pairs) - 1)


def test_no_pairs():
    assert align([]) == []
