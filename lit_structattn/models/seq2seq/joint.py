"""Joint attention outputs (Shankar et al. 2018): ``log p(y) = log sum_a P(a) P(y | x_a)`` over
every source position (``full_joint``) or the most attended ones (``beam_joint``), and the
sampled baselines ``sample_joint`` and ``hard`` trained with REINFORCE. :class:`JointOutputs`
holds the encoder-decoder's output layer for every ``output`` choice, the soft one included."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ...layers.registry import names

OUTPUTS = names("seq2seq", "output")
SAMPLED_OUTPUTS = ("hard", "sample_joint")  # trained with REINFORCE


class JointOutputs:
    """The output layer of :class:`~lit_structattn.models.seq2seq.Seq2Seq` (a mixin of it): the
    soft output ``V h~_t`` and the joint ones. Uses the model's ``output``, ``joint_k``,
    ``hidden_dim``, ``combine`` (``U`` of ``h~ = tanh(U [c; h])``), ``generator`` (``V``),
    ``dropout`` and ``_teacher_forced``."""

    @contextmanager
    def joint_positions(self, k: int | None) -> Iterator[None]:
        """Within the block, joint outputs keep (or sample) ``k`` positions instead of
        ``joint_k`` (``None``: unchanged), e.g. to decode with another K than in training."""
        trained = self.joint_k
        self.joint_k = trained if k is None else k
        try:
            yield
        finally:
            self.joint_k = trained

    def memory_share(self, memory: Tensor) -> Tensor:
        """``U_m m_j [..., S, H]``: the part of the attentional layer ``tanh(U [c; h])`` that
        a position's memory ``memory [..., S, M]`` contributes when it stands in for the
        context. Computed once per source position, not once per (token, kept position)."""
        return nn.functional.linear(memory, self._combine_columns()[0])

    def _combine_columns(self) -> tuple[Tensor, Tensor]:
        """``(U_m [H, M], U_h [H, H])``: the columns of the attentional layer's ``U [c; h]``
        that read the context and the decoder state."""
        return self.combine.weight.split(
            [self.combine.in_features - self.hidden_dim, self.hidden_dim], dim=1)

    def _position_log_probs(self, queries: Tensor, shares: Tensor) -> Tensor:
        """``log P_t(y | x_a) [B, T, K, V]``: the output softmax of ``tanh(U [m_a; h_t])``, the
        soft layer with one position's memory in place of the context, for the decoder states
        ``queries [B, T, H]`` and the positions' shares ``U_m m_a`` (``shares [B, T or 1, K,
        H]``, :meth:`memory_share`)."""
        own = nn.functional.linear(queries, self._combine_columns()[1])  # U_h h_t [B, T, H]
        projected = shares + own[:, :, None]
        logits = self.generator(self.dropout(torch.tanh(projected)))
        return logits.float().log_softmax(-1)  # float32 under autocast: the loss sums these

    @staticmethod
    def _shares_at(shares: Tensor, positions: Tensor, rows: Tensor | None = None) -> Tensor:
        """``shares [B', S, H]`` at ``positions [B, T, K]`` of rows ``rows [B]`` (default: row
        ``b`` for ``b`` in ``0..B-1``): ``[B, T, K, H]``."""
        if rows is None:
            rows = torch.arange(len(positions), device=positions.device)
        return shares[rows[:, None, None], positions]

    def _predict(
        self, combined: Tensor, queries: Tensor, weights: Tensor, shares: Tensor | None,
        rows: Tensor | None = None,
    ) -> Tensor:
        """Output scores ``[B, T, V]`` (their log-softmax is ``log p(y_t)``) from the soft
        attentional outputs ``combined [B, T, H]``, the decoder states ``queries [B, T, H]``,
        the attention ``weights [B, T, S]`` and the positions' shares of the attentional layer
        ``shares [B', S, H]`` (:meth:`memory_share`; row ``b`` of the outputs reads row
        ``rows[b]``, given ``rows [B]``, else row ``b``; the soft output reads none).

        ``soft``: ``V h~_t``. Joint attention (Shankar et al. 2018): ``log sum_a P_t(a) P_t(y |
        x_a)`` (:meth:`_position_log_probs`) over every position (``full_joint``) or the
        ``joint_k`` most attended ones (``beam_joint`` and, when decoding, ``sample_joint``;
        ``hard``: the most attended one). The kept weights are renormalized over the kept
        mass, which is what the authors' cross-entropy on ``log q`` amounts to, so that every
        step gives a distribution and beam search compares like with like.
        """
        if self.output == "soft":
            return self.generator(combined)
        keep = 1 if self.output == "hard" else self.joint_k
        if self.output != "full_joint" and keep < weights.shape[-1]:
            kept, positions = weights.topk(keep, dim=-1)  # [B, T, K]
            shares = self._shares_at(shares, positions, rows)
        else:
            kept = weights
            shares = (shares if rows is None else shares[rows])[:, None]  # [B, 1, S, H]
        log_p = self._position_log_probs(queries, shares)
        log_prior = kept.clamp_min(1e-30).log() - kept.sum(-1, keepdim=True).log()
        return torch.logsumexp(log_prior[..., None] + log_p, dim=2)

    def _sampled_log_likelihood(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, tgt_out: Tensor,
        fertility: Tensor | None,
    ) -> Tensor:
        """``[B, T]`` the estimate of ``log p(y_t)`` of :meth:`loss`, with its REINFORCE
        gradient."""
        _, queries, weights, source = self._teacher_forced(src, src_lengths, tgt_in, fertility)
        batch, steps, length = weights.shape
        samples = self.joint_k
        if samples < 2:
            raise ValueError(f"{self.output} needs joint_k >= 2 samples for its baseline")
        positions = torch.multinomial(weights.detach().reshape(-1, length), samples,
                                      replacement=True).view(batch, steps, samples)
        log_p = self._position_log_probs(queries, self._shares_at(source.memory_share, positions))
        target = tgt_out[:, :, None, None].expand(-1, -1, samples, 1)
        rewards = log_p.gather(-1, target).squeeze(-1)  # [B, T, M]
        if self.output == "hard":
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
