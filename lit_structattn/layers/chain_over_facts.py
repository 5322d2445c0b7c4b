"""Chain attention over memory slots (Kim et al. 2017, §4.3 and A.4).

K attention steps over n memory slots (facts) form a linear-chain CRF whose "labels" are the
slots: unary potentials per step, optional pairwise potentials between consecutive steps, and an
option that forbids selecting the same slot twice in a row.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..common.constants import very_negative
from ..structured import LinearChainCRF


class ChainAttention(nn.Module):
    """The CRF over K steps x n slots; potentials come from the model.

    Args:
        forbid_repeat: put -inf (a very large negative log-potential) on selecting the same slot
            at steps k and k+1, as the paper's binary CRF does.
    """

    def __init__(self, forbid_repeat: bool = True) -> None:
        super().__init__()
        self.forbid_repeat = forbid_repeat

    def forward(
        self, unary: Tensor, pairwise: Tensor | None = None, mask: Tensor | None = None
    ) -> LinearChainCRF:
        """The chain as a :class:`LinearChainCRF` over steps x slots: its ``marginals
        [B, K, n]`` (p(z_k = i)), ``edge_marginals [B, K-1, n, n]`` (p(z_k = i, z_{k+1} = j)) and
        ``argmax [B, K]`` (the most likely slot sequence) are computed on first access (a
        training step that never reads ``argmax`` skips Viterbi).

        Args:
            unary: ``[B, K, n]`` log-potentials of selecting slot i at step k.
            pairwise: ``[B, K-1, n, n]`` log-potentials of slot i at step k then slot j at step
                k+1, or None (a unary CRF: steps independent but for ``forbid_repeat``).
            mask: ``[B, n]`` bool, True = real slot; padded slots are never selected.
        """
        slots = unary.shape[-1]
        if mask is not None:
            unary = unary.masked_fill(~mask[:, None, :], very_negative(unary.dtype))
        if pairwise is None:
            pairwise = unary.new_zeros(slots, slots)
        if self.forbid_repeat:
            eye = torch.eye(slots, dtype=torch.bool, device=unary.device)
            pairwise = pairwise.masked_fill(eye, very_negative(pairwise.dtype))
        return LinearChainCRF(unary, pairwise)
