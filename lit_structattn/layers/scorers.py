"""Scoring functions between queries and keys (Luong et al. 2015; Bahdanau et al. 2015).

Each scorer maps ``query [B, T, Dq]`` and ``keys [B, L, Dk]`` to ``scores [B, T, L]``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from ..common.checks import check_choice


class DotScorer(nn.Module):
    """``score(q, k) = q . k`` (needs ``Dq == Dk``)."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        if query_dim != key_dim:
            raise ValueError(f"dot scores need query_dim == key_dim, got {query_dim} != {key_dim}")

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2))


class GeneralScorer(nn.Module):
    """Bilinear ``score(q, k) = q^T W k`` (Luong's ``general``)."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.project = nn.Linear(query_dim, key_dim, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        return torch.bmm(self.project(query), keys.transpose(1, 2))


class MLPScorer(nn.Module):
    """Feed-forward ``score(q, k) = v^T tanh(W_q q + W_k k + b)`` (Bahdanau's ``concat``)."""

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__()
        hidden_dim = hidden_dim or key_dim
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=True)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh(self.query_proj(query).unsqueeze(2) + self.key_proj(keys).unsqueeze(1))
        return self.v(hidden).squeeze(-1)  # [B, T, L]


SCORERS: dict[str, type[nn.Module]] = {
    "dot": DotScorer,
    "general": GeneralScorer,
    "mlp": MLPScorer,
}
#: The names of :data:`SCORERS` as a type, for constructor arguments: a config parser then
#: lists them in ``--help`` and refuses any other name before building anything.
ScoreName = Literal[tuple(sorted(SCORERS))]


def build_scorer(name: str, query_dim: int, key_dim: int) -> nn.Module:
    """The scorer called ``name``; ``ValueError`` listing the valid names otherwise."""
    check_choice("attention score", name, sorted(SCORERS))
    return SCORERS[name](query_dim, key_dim)
