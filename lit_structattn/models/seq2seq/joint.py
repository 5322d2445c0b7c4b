"""Joint attention outputs (Shankar et al. 2018): ``log p(y) = log sum_a P(a) P(y | x_a)`` over
every source position (``full_joint``) or the most attended ones (``beam_joint``), and the
sampled baselines ``sample_joint`` and ``hard`` trained with REINFORCE.

:class:`JointOutput` is the encoder-decoder's output layer for every ``output`` choice, the soft
one included: a module that owns the attentional layer ``U`` of ``h~ = tanh(U [c; h])``, the
output projection ``V`` and their dropout, and reads nothing of the model that holds it. The
positions a joint output keeps are an argument of each call (its trained ``k`` by default), so
decoding with another K than in training changes nothing in the module."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...layers.registry import OutputName, check_attention, names

OUTPUTS = names("seq2seq", "output")
SAMPLED_OUTPUTS = ("hard", "sample_joint")  # trained with REINFORCE


class JointOutput(nn.Module):
    """The output scores of the encoder-decoder from its decoder states and attention.

    Args:
        output: ``soft`` (Luong et al.: ``V h~_t``), ``full_joint``, ``beam_joint``,
            ``sample_joint`` or ``hard`` (Shankar et al. 2018; see :meth:`forward` and
            :meth:`sampled_log_likelihood`).
        memory_dim, hidden_dim: the sizes of the source memory ``m_j`` (the context ``c_t``)
            and of the decoder state ``h_t``.
        vocab: the target vocabulary size.
        k: the positions beam-joint keeps, or the attention samples ``sample_joint`` and
            ``hard`` draw in training (when decoding, ``sample_joint`` keeps the ``k`` most
            attended positions as beam-joint does and ``hard`` the most attended one).
        dropout: on ``h~_t`` before ``V``.

    Layers: ``combine`` (``U``, no bias) and ``generator`` (``V`` with its bias).
    """

    def __init__(
        self, output: OutputName, memory_dim: int, hidden_dim: int, vocab: int, k: int = 6,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_attention("seq2seq", "output", output)
        self.kind, self.k = output, _checked_k(k)
        self.combine = nn.Linear(memory_dim + hidden_dim, hidden_dim, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(hidden_dim, vocab)

    @property
    def joint(self) -> bool:
        """Whether the scores mix one softmax per source position (every ``output`` but
        ``soft``): they read the positions' :meth:`memory_share`."""
        return self.kind != "soft"

    @property
    def sampled(self) -> bool:
        """Whether training samples the positions (``hard``, ``sample_joint``): the loss is
        :meth:`sampled_log_likelihood`."""
        return self.kind in SAMPLED_OUTPUTS

    def attentional(self, context: Tensor, queries: Tensor) -> Tensor:
        """``h~ = tanh(U [c; h]) [B, T, H]`` (after dropout) from the attention's ``context
        [B, T, M]`` and the decoder states ``queries [B, T, H]``."""
        return self.dropout(torch.tanh(self.combine(torch.cat([context, queries], dim=-1))))

    def memory_share(self, memory: Tensor) -> Tensor:
        """``U_m m_j [..., S, H]``: the part of the attentional layer ``tanh(U [c; h])`` that
        a position's memory ``memory [..., S, M]`` contributes when it stands in for the
        context. Computed once per source position, not once per (token, kept position)."""
        return nn.functional.linear(memory, self._combine_columns()[0])

    def _combine_columns(self) -> tuple[Tensor, Tensor]:
        """``(U_m [H, M], U_h [H, H])``: the columns of ``U [c; h]`` that read the context and
        the decoder state."""
        hidden = self.combine.out_features
        return self.combine.weight.split([self.combine.in_features - hidden, hidden], dim=1)

    def position_log_probs(self, queries: Tensor, shares: Tensor) -> Tensor:
        """``log P_t(y | x_a) [B, T, K, V]``: the output softmax of ``tanh(U [m_a; h_t])``, the
        soft layer with one position's memory in place of the context, for the decoder states
        ``queries [B, T, H]`` and the positions' shares ``U_m m_a`` (``shares [B, T or 1, K,
        H]``, :meth:`memory_share`)."""
        own = nn.functional.linear(queries, self._combine_columns()[1])  # U_h h_t [B, T, H]
        projected = shares + own[:, :, None]
        logits = self.generator(self.dropout(torch.tanh(projected)))
        return logits.float().log_softmax(-1)  # float32 under autocast: the loss sums these

    def forward(
        self, combined: Tensor, queries: Tensor, weights: Tensor, shares: Tensor | None,
        rows: Tensor | None = None, k: int | None = None,
    ) -> Tensor:
        """Output scores ``[B, T, V]`` (their log-softmax is ``log p(y_t)``) from the soft
        attentional outputs ``combined [B, T, H]`` (:meth:`attentional`), the decoder states
        ``queries [B, T, H]``, the attention ``weights [B, T, S]`` and the positions' shares of
        the attentional layer ``shares [B', S, H]`` (:meth:`memory_share`; row ``b`` of the
        outputs reads row ``rows[b]``, given ``rows [B]``, else row ``b``; the soft output
        reads none).

        ``soft``: ``V h~_t``. Joint attention (Shankar et al. 2018): ``log sum_a P_t(a) P_t(y |
        x_a)`` (:meth:`position_log_probs`) over every position (``full_joint``) or the ``k``
        most attended ones (``beam_joint`` and ``sample_joint``; ``hard``: the most attended
        one), with ``k`` the trained one unless given. The kept weights are renormalized over
        the kept mass, which is what the authors' cross-entropy on ``log q`` amounts to, so
        that every step gives a distribution and beam search compares like with like.
        """
        if self.kind == "soft":
            return self.generator(combined)
        keep = 1 if self.kind == "hard" else _checked_k(self.k if k is None else k)
        if self.kind != "full_joint" and keep < weights.shape[-1]:
            kept, positions = weights.topk(keep, dim=-1)  # [B, T, K]
            shares = _shares_at(shares, positions, rows)
        else:
            kept = weights
            shares = (shares if rows is None else shares[rows])[:, None]  # [B, 1, S, H]
        log_p = self.position_log_probs(queries, shares)
        log_prior = kept.clamp_min(1e-30).log() - kept.sum(-1, keepdim=True).log()
        return torch.logsumexp(log_prior[..., None] + log_p, dim=2)

    def sampled_log_likelihood(
        self, queries: Tensor, weights: Tensor, shares: Tensor, targets: Tensor
    ) -> Tensor:
        """``[B, T]`` the Monte Carlo estimate of ``log p(y_t)`` of the targets ``targets [B,
        T]`` from ``k`` positions sampled from the attention ``weights [B, T, S]`` (decoder
        states ``queries [B, T, H]``, the positions' ``shares [B, S, H]``), with its REINFORCE
        gradient (see :meth:`~lit_structattn.models.seq2seq.Seq2Seq.loss`)."""
        batch, steps, length = weights.shape
        samples = self.k
        if samples < 2:
            raise ValueError(f"{self.kind} needs joint_k >= 2 samples for its baseline")
        positions = torch.multinomial(weights.detach().reshape(-1, length), samples,
                                      replacement=True).view(batch, steps, samples)
        log_p = self.position_log_probs(queries, _shares_at(shares, positions))
        target = targets[:, :, None, None].expand(-1, -1, samples, 1)
        rewards = log_p.gather(-1, target).squeeze(-1)  # [B, T, M]
        if self.kind == "hard":
            estimate = rewards.mean(-1)
            baseline = (rewards.sum(-1, keepdim=True) - rewards) / (samples - 1)
        else:
            estimate = rewards.logsumexp(-1) - math.log(samples)
            itself = torch.eye(samples, dtype=torch.bool, device=rewards.device)  # [M, M]
            left_out = rewards[..., None, :].masked_fill(itself, -torch.inf)  # [B, T, M, M]
            baseline = left_out.logsumexp(-1) - math.log(samples - 1)
        signal = (estimate[..., None] - baseline).detach()
        log_prior = weights.gather(-1, positions).clamp_min(1e-30).log()
        score_function = log_prior - log_prior.detach()  # 0, with the gradient of log P_t(a)
        return estimate + (signal * score_function).sum(-1)

    def extra_repr(self) -> str:
        return f"{self.kind}, k={self.k}"


def _checked_k(k: int) -> int:
    """``k`` if it keeps at least one position, else ``ValueError``."""
    if k < 1:
        raise ValueError(f"joint_k must be >= 1, got {k}")
    return k


def _shares_at(shares: Tensor, positions: Tensor, rows: Tensor | None = None) -> Tensor:
    """``shares [B', S, H]`` at ``positions [B, T, K]`` of rows ``rows [B]`` (default: row ``b``
    for ``b`` in ``0..B-1``): ``[B, T, K, H]``."""
    if rows is None:
        rows = torch.arange(len(positions), device=positions.device)
    return shares[rows[:, None, None], positions]
