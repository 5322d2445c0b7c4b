"""Syntactic attention (Kim et al. 2017, §3.2 and A.1): every word attends to its soft parent.

A BiLSTM (the "parsing LSTM") runs over ``[root; x_1 .. x_N]`` where the root is a learned
vector; arc potentials ``theta_ij = tanh(s^T tanh(W1 h_i + W2 h_j + b))`` score head i ->
modifier j. ``structured`` attention takes the arc marginals of a projective dependency CRF
(inside-outside on Eisner's algorithm); the ``simple`` baseline a softmax over the heads of each
word. Context vectors: soft parent ``c_j = sum_i p(i -> j) x_i`` and soft children
``d_i = sum_j p(i -> j) x_j``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..attention.transforms import masked_softmax
from ..common.checks import check_choice
from ..structured import DependencyCRF
from .encoders import BiLSTMEncoder

MODES = ("structured", "simple")


@dataclass
class SyntacticOutput:
    """``parents``/``children`` ``[B, N, D]``: soft parent and soft children of each word;
    ``marginals [B, N+1, N+1]``: p(head i -> modifier j), index 0 = root, columns of real words
    sum to 1; ``arc_scores [B, N+1, N+1]``: the potentials (for the Eisner parse)."""

    parents: Tensor
    children: Tensor
    marginals: Tensor
    arc_scores: Tensor


def arc_mask(lengths: Tensor, size: int) -> Tensor:
    """bool ``[B, size, size]``: True where ``h -> m`` is a possible arc (``m`` a real word,
    ``h`` the root or another real word)."""
    positions = torch.arange(size, device=lengths.device)
    real = positions[None, :] <= lengths[:, None]  # root and words, [B, size]
    heads = real[:, :, None]
    modifiers = real[:, None, :] & (positions[None, None, :] > 0)
    return heads & modifiers & (positions[:, None] != positions[None, :])


class SyntacticAttention(nn.Module):
    """Soft parents from a latent dependency parse.

    Args:
        input_dim: size ``D`` of the word vectors.
        hidden_dim: size of each direction of the parsing BiLSTM.
        mlp_dim: size of the arc-scoring MLP (default ``hidden_dim``).
        mode: ``structured`` (dependency-CRF marginals) or ``simple`` (softmax over heads).
        multiroot: whether the root may have several children (structured mode).
        bounded: the paper's outer ``tanh`` on the arc scores (in ``[-1, 1]``); False drops it,
            ``theta_ij = s^T tanh(W1 h_i + W2 h_j + b)`` (Kiperwasser & Goldberg's scorer).
    """

    def __init__(
        self,
        input_dim: int,
        hidden_dim: int,
        mlp_dim: int | None = None,
        mode: str = "structured",
        multiroot: bool = True,
        bounded: bool = True,
    ) -> None:
        super().__init__()
        check_choice("syntactic attention mode", mode, MODES)
        mlp_dim = mlp_dim or hidden_dim
        self.mode = mode
        self.multiroot = multiroot
        self.bounded = bounded
        self.root = nn.Parameter(torch.randn(input_dim) * 0.1)
        self.parser = BiLSTMEncoder(input_dim, hidden_dim)
        self.head_proj = nn.Linear(2 * hidden_dim, mlp_dim, bias=True)
        self.modifier_proj = nn.Linear(2 * hidden_dim, mlp_dim, bias=False)
        self.s = nn.Linear(mlp_dim, 1, bias=False)

    def with_root(self, words: Tensor) -> Tensor:
        """``[B, N, D]`` -> ``[B, N+1, D]`` with the learned root vector at index 0."""
        return torch.cat([self.root.expand(words.shape[0], 1, -1), words], dim=1)

    def arc_scores(self, words: Tensor, lengths: Tensor) -> Tensor:
        """``theta [B, N+1, N+1]`` for ``words [B, N, D]`` (``theta[b, h, m]``: head h -> m)."""
        states = self.parser(self.with_root(words), lengths + 1)  # [B, N+1, 2H]
        hidden = self.head_proj(states)[:, :, None] + self.modifier_proj(states)[:, None, :]
        scores = self.s(torch.tanh(hidden)).squeeze(-1)
        return torch.tanh(scores) if self.bounded else scores

    def forward(self, words: Tensor, lengths: Tensor) -> SyntacticOutput:
        """Soft parents and children of ``words [B, N, D]`` with ``lengths [B]``."""
        scores = self.arc_scores(words, lengths)
        if self.mode == "structured":
            marginals = DependencyCRF(scores, lengths, multiroot=self.multiroot).marginals
        else:
            marginals = masked_softmax(scores, dim=1, mask=arc_mask(lengths, scores.shape[1]))
        nodes = self.with_root(words)  # [B, N+1, D]
        parents = marginals.transpose(1, 2) @ nodes  # c_j = sum_i p(i -> j) x_i
        children = marginals @ nodes  # d_i = sum_j p(i -> j) x_j
        return SyntacticOutput(parents[:, 1:], children[:, 1:], marginals, scores)

    def parse(self, words: Tensor, lengths: Tensor) -> Tensor:
        """The Eisner argmax heads ``[B, N+1]`` (0 at the root slot and padding)."""
        scores = self.arc_scores(words, lengths)
        return DependencyCRF(scores, lengths, multiroot=self.multiroot).argmax
