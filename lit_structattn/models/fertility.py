"""The PREDICTED fertility strategy of Malaviya et al. (2018, §4): a BiLSTM tagger that predicts,
for every source token, how many target words the aligner linked it to (classes ``0..K-1``, the
last one meaning "K-1 or more"); at translation time the fertility is the expected class plus a
slack of 1. The authors' sizes: embeddings and states 256, 2 layers, dropout 0.2, K = 10.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from ..common.masks import lengths_to_mask
from ..layers.encoders import BiLSTMEncoder


def _batches(rows: Sequence[Sequence[int]], batch_size: int, order: Sequence[int]):
    """``(positions, padded [B, S] ids, lengths [B])`` over ``rows`` in ``order``."""
    for start in range(0, len(order), batch_size):
        chosen = list(order[start : start + batch_size])
        lengths = torch.tensor([len(rows[i]) for i in chosen])
        padded = torch.zeros(len(chosen), int(lengths.max()), dtype=torch.long)
        for b, i in enumerate(chosen):
            padded[b, : len(rows[i])] = torch.tensor(rows[i])
        yield chosen, padded, lengths

__all__ = ["FertilityPredictor", "fertility_targets", "fit_fertility_predictor",
           "predict_fertilities"]


def fertility_targets(
    links: Sequence[Iterable[tuple[int, int]]], source_lengths: Sequence[int], classes: int = 10
) -> list[list[int]]:
    """Per source token, the number of target words it is linked to, capped at ``classes - 1``
    (source-to-target links per sentence, e.g. from
    :func:`lit_structattn.datamodules.alignment.align`). ``ValueError`` if ``links`` and
    ``source_lengths`` differ in length."""
    if len(links) != len(source_lengths):
        raise ValueError(f"{len(links)} link sets but {len(source_lengths)} source lengths")
    targets = []
    for sentence_links, length in zip(links, source_lengths, strict=True):
        counts = Counter(i for i, _ in sentence_links)
        targets.append([min(counts.get(i, 0), classes - 1) for i in range(length)])
    return targets


class FertilityPredictor(nn.Module):
    """BiLSTM classifier of source-token fertilities.

    Args:
        vocab_size: source vocabulary (id 0 = padding).
        embed_dim, hidden_dim, num_layers, dropout: the tagger (hidden size per direction).
        classes: ``K``, fertilities ``0..K-1``.
    """

    def __init__(
        self, vocab_size: int, embed_dim: int = 256, hidden_dim: int = 256, num_layers: int = 2,
        dropout: float = 0.2, classes: int = 10,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.rnn = BiLSTMEncoder(embed_dim, hidden_dim, num_layers, dropout)
        self.output = nn.Linear(2 * hidden_dim, classes)

    def forward(self, src: Tensor, lengths: Tensor) -> Tensor:
        """``src [B, S]``, ``lengths [B]`` -> class scores ``[B, S, K]``."""
        states = self.rnn(self.dropout(self.embed(src)), lengths)
        return self.output(self.dropout(states))

    def loss(self, src: Tensor, lengths: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy over the real tokens; ``targets [B, S]`` classes (any value at
        padding)."""
        mask = lengths_to_mask(lengths, src.shape[1])
        scores = self(src, lengths)
        return nn.functional.cross_entropy(scores[mask], targets[mask])

    @torch.no_grad()
    def expected(self, src: Tensor, lengths: Tensor, slack: float = 1.0) -> Tensor:
        """The fertility to bound the attention with: ``E[class] + slack`` ``[B, S]`` (0 at
        padding)."""
        probabilities = self(src, lengths).softmax(-1)
        classes = torch.arange(probabilities.shape[-1], dtype=probabilities.dtype,
                               device=probabilities.device)
        mean = probabilities @ classes + slack
        return mean * lengths_to_mask(lengths, src.shape[1])


def fit_fertility_predictor(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], vocab_size: int,
    epochs: int = 5, batch_size: int = 64, lr: float = 1e-3, seed: int = 0, **sizes: int,
) -> FertilityPredictor:
    """Train a :class:`FertilityPredictor` (Adam, gradient norm 5) on source id sequences and
    their aligner fertility classes (:func:`fertility_targets`), batches of similar length in
    random order; ``sizes`` go to the predictor (``embed_dim``, ``hidden_dim``, ...). Shows a
    progress bar; returns the model in eval mode. ``ValueError`` if a source and its targets
    differ in length (or the lists do).

    Everything random (initialization, batch order, dropout) follows ``seed`` alone and the
    global random state is left as it was: a run that trains the predictor and one that finds
    it cached continue identically."""
    if len(sources) != len(targets) or any(
            len(s) != len(t) for s, t in zip(sources, targets, strict=True)):
        raise ValueError("every source needs one fertility target per token")

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _fit(sources, targets, vocab_size, epochs, batch_size, lr, seed, **sizes)


def _fit(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], vocab_size: int,
    epochs: int, batch_size: int, lr: float, seed: int, **sizes: int,
) -> FertilityPredictor:
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(seed)
    model = FertilityPredictor(vocab_size, **sizes)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    by_length = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    chunks = [by_length[i : i + batch_size] for i in range(0, len(by_length), batch_size)]
    model.train()
    for epoch in range(epochs):
        shuffled = [chunks[i] for i in torch.randperm(len(chunks), generator=generator)]
        bar = tqdm(shuffled, desc=f"fertility predictor, epoch {epoch + 1}/{epochs}",
                   leave=False)
        for chunk in bar:
            _, src, lengths = next(_batches(sources, len(chunk), chunk))
            _, gold, _ = next(_batches(targets, len(chunk), chunk))
            loss = model.loss(src, lengths, gold)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
    return model.eval()


def predict_fertilities(
    model: FertilityPredictor, sources: Sequence[Sequence[int]], slack: float = 1.0,
    batch_size: int = 256,
) -> list[list[float]]:
    """The expected fertility plus ``slack`` of every token of every source (input order)."""
    result: list[list[float]] = [[] for _ in sources]
    for chosen, src, lengths in _batches(sources, batch_size, range(len(sources))):
        expected = model.expected(src, lengths, slack)
        for b, i in enumerate(chosen):
            result[i] = expected[b, : len(sources[i])].tolist()
    return result
