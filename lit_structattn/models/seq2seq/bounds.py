"""Fertility upper bounds for constrained attention (Malaviya et al. 2018): the decoder keeps
the cumulative attention ``beta`` of every source word and bounds step ``t`` by ``u_t =
fertility - beta_{t-1}`` (clamped at 0); with a sink the last real source token is the
``<SINK>``, whose bound never binds, and the exhaustion bonus ``c * u_t`` is added to the scores
of the other words."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from .source import EncodedSource


def with_fertility(
    source: EncodedSource, src_lengths: Tensor, fertility: Tensor | None, constant: float,
    sink: bool,
) -> EncodedSource:
    """``source`` with the ``fertility [B, S]`` of every real token (the given per-token
    fertilities, else ``constant``; 0 at padding; unbounded at the sink) and the ``bonus_mask
    [B, S]`` of the tokens that get the exhaustion bonus (the real ones but the sink)."""
    mask = source.mask
    if fertility is None:
        fertility = torch.full(mask.shape, constant, device=mask.device)
    fertility = fertility.to(source.memory.dtype).masked_fill(~mask, 0)
    sink_mask = torch.zeros_like(mask)
    if sink:
        sink_mask = nn.functional.one_hot(src_lengths - 1, mask.shape[1]).bool()
        unbounded = 2.0 * mask.shape[1] + 1e4  # more than any translation can give it
        fertility = fertility.masked_fill(sink_mask, unbounded)
    return replace(source, fertility=fertility, bonus_mask=mask & ~sink_mask)


def step_bounds(
    source: EncodedSource, coverage: Tensor, exhaustion_bonus: float
) -> tuple[Tensor, Tensor | None]:
    """The bounds ``u_t [B, 1, S]`` of one step given the cumulative attention ``coverage [B,
    S]``, and its exhaustion bonus ``c * u_t`` at the bonus tokens (None when ``c = 0``).

    One step gives no word more than 1, so bounds above 1 never bind: the returned bounds are
    clamped at 1, which changes nothing but keeps the huge sink bound out of float32 sums."""
    remaining = (source.fertility - coverage).clamp_min(0)[:, None]  # u_t [B, 1, S]
    bonus = None
    if exhaustion_bonus:
        bonus = exhaustion_bonus * remaining * source.bonus_mask[:, None]
    return remaining.clamp_max(1), bonus
