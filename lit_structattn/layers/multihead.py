"""Multi-head dot-product attention with any transform of :mod:`lit_structattn.attention`, and
its bounded form: each key's total attention across the queries capped.

The problem: a Transformer's attention is ``softmax(q k^T / sqrt(d) + bias)`` over the keys;
here the softmax is any transform taken by name (``sparsemax``, ``csparsemax``, ...), with the
masks of ``torch.nn.MultiheadAttention`` or of Hugging Face's attention functions.

Bounded attention is the Transformer analogue of fertility (Malaviya et al. 2018): key ``j`` may
receive at most ``cap_j`` attention from all the queries together. The queries are taken in
order, as a decoder takes its steps: query ``t`` gets the constrained transform (``csparsemax``,
``centmax15``, ``csoftmax``) with the bounds ``u_t = cap - (attention each key received from the
queries before t)``, clamped to ``[0, 1]`` (one query gives no key more than 1), exactly as the
seq2seq decoder's fertility bounds (:mod:`lit_structattn.models.seq2seq.bounds`). Gradients flow
through the budgets, as through the decoder's coverage. Keys a query may not attend (masks) get
exactly 0 from it, so they spend none of their budget on it.

When the budget runs out: while ``cap * (allowed keys) >= (queries)`` holds along a bidirectional
mask, or ``cap >= 1`` along a causal one, every query's remaining bounds sum to at least 1 and
every cap holds exactly. Otherwise a query whose allowed keys have less than 1 left in total
would have no feasible distribution; that query's bounds are raised by one common amount, the
smallest that makes them sum to 1 (``u_j + (1 - sum u) / n`` over its ``n`` allowed keys), so
the row is still a distribution, every key's overshoot is at most that spill-over, and the
query's weights are then its bounds themselves (the one feasible point). Queries are read in
order along their dimension, so with right padding the padded queries come last and spend only
what the real ones left.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..attention import Transform, get_transform
from ..common.precision import compute_dtype


def bounded_attention(
    scores: Tensor, cap: float | Tensor, transform: Transform, mask: Tensor | None = None
) -> Tensor:
    """The constrained ``transform`` of every query in order, each bounded by what the keys
    have left of their ``cap`` (module docstring).

    Args:
        scores: ``[..., T, S]`` scores of ``T`` queries over ``S`` keys.
        cap: the total attention a key may receive: a float, or a tensor broadcastable to
            ``[..., S]`` (one cap per key, as fertilities are).
        transform: a constrained transform (``transform.constrained``).
        mask: bool, broadcastable to ``scores``; True = the query may attend the key.
    Returns:
        ``[..., T, S]`` weights; every row a distribution over its allowed keys, every key's
        column sum at most its cap where the budget suffices.
    """
    if mask is not None:
        mask = mask.expand(scores.shape)
    received = scores.new_zeros(scores.shape[:-2] + scores.shape[-1:], dtype=compute_dtype(scores))
    rows = []
    for t in range(scores.shape[-2]):
        allowed = None if mask is None else mask[..., t, :]
        upper = feasible_bounds(cap - received, allowed)
        row = transform(scores[..., t, :], upper=upper, mask=allowed)
        received = received + row
        rows.append(row)
    return torch.stack(rows, dim=-2)


def feasible_bounds(remaining: Tensor, allowed: Tensor | None) -> Tensor:
    """One query's bounds ``[..., S]`` from the keys' ``remaining`` budgets ``[..., S]``:
    clamped to ``[0, 1]``, and raised by a common amount over the ``allowed [..., S]`` keys where
    they sum to less than 1 (module docstring)."""
    upper = remaining.clamp(0, 1)
    if allowed is None:
        allowed = torch.ones_like(upper, dtype=torch.bool)
    total = (upper * allowed).sum(-1, keepdim=True)
    count = allowed.sum(-1, keepdim=True).clamp_min(1)
    spill = (1 - total).clamp_min(0) / count
    return upper + spill * allowed


def attention_weights(
    scores: Tensor, transform: Transform, mask: Tensor | None = None,
    cap: float | Tensor | None = None,
) -> Tensor:
    """``transform`` of ``scores [..., T, S]`` over the keys, by :func:`bounded_attention` for a
    constrained transform (which needs ``cap``); ``mask`` bool, True = allowed.

    Raises:
        ValueError: as :func:`check_cap`.
    """
    check_cap(transform, cap)
    if transform.constrained:
        return bounded_attention(scores, cap, transform, mask)
    return transform(scores, mask=mask)


def check_cap(transform: Transform, cap: float | Tensor | None) -> None:
    """Raise ``ValueError`` for a constrained transform without ``cap``, or a ``cap`` for
    another one."""
    if transform.constrained and cap is None:
        raise ValueError(f"the {transform.name} transform bounds each key's total attention: "
                         "it needs a cap (cap=...)")
    if not transform.constrained and cap is not None:
        raise ValueError(f"the {transform.name} transform takes no cap; csparsemax or csoftmax "
                         "bound each key's total attention")


def split_mask(mask: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """``(allowed, bias)`` of a Hugging Face-style attention mask: a bool mask is ``allowed``
    (True = may attend); a float mask is added to the scores, except its ``-inf`` entries and
    those at its dtype's lowest value (eager masks' "not allowed"), which become not allowed.
    Sparse transforms need the mask itself: a huge negative score is no exact 0 for them."""
    if mask is None or mask.dtype == torch.bool:
        return mask, None
    blocked = mask <= torch.finfo(mask.dtype).min
    return ~blocked, mask.masked_fill(blocked, 0)


def dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, transform: Transform,
    mask: Tensor | None = None, bias: Tensor | None = None, cap: float | Tensor | None = None,
    scaling: float | None = None, dropout: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """``weights = transform(scaling * q k^T + bias)`` over the allowed keys, ``out = dropout(
    weights) v``.

    Args:
        query: ``[B, H, T, D]``; key: ``[B, H, S, D]``; value: ``[B, H, S, Dv]``.
        transform: any transform; a constrained one gives :func:`bounded_attention`.
        mask: bool, broadcastable to ``[B, H, T, S]``; True = may attend.
        bias: float, broadcastable to ``[B, H, T, S]``, added to the scores.
        cap: the bounded attention's cap (float, or broadcastable to ``[B, H, S]``).
        scaling: the scores' factor, default ``D ** -0.5``.
        dropout: probability of dropping a weight (only the output sees it).
    Returns:
        ``(out [B, H, T, Dv], weights [B, H, T, S])``; ``weights`` before dropout, so that they
        obey their transform; a query with no allowed key gets all zeros (no NaN).
    """
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = (query @ key.transpose(-1, -2)) * scaling
    if bias is not None:
        scores = scores + bias
    weights = attention_weights(scores, transform, mask, cap)
    dropped = nn.functional.dropout(weights, p=dropout) if dropout else weights
    return dropped @ value, weights


class MultiheadAttention(nn.Module):
    """``torch.nn.MultiheadAttention`` (batch first) with any transform by name.

    Args:
        embed_dim: size ``E`` of the queries and of the output.
        num_heads: ``H``; divides ``E``.
        transform: ``softmax``, ``sparsemax``, ``entmax15``, ``csparsemax``, ``centmax15``, ...
            (:func:`get_transform`).
        dropout: dropout on the attention weights (training only).
        bias: biases in the input and output projections.
        cap: for a constrained transform, the total attention a key may receive from all the
            queries of a call (:func:`bounded_attention`); refused for the other transforms.
        kdim, vdim: sizes of the keys and values (default ``E``).
        transform_options: the transform's options, e.g. ``{"alpha": 1.3}`` for ``entmax``.

    With ``softmax`` and the same projection weights the outputs equal
    ``torch.nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)``'s, except that a
    query with no allowed key gets zeros where torch gives NaN.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, transform: str = "softmax", dropout: float = 0.0,
        bias: bool = True, cap: float | None = None, kdim: int | None = None,
        vdim: int | None = None, transform_options: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.transform = get_transform(transform, **(transform_options or {}))
        check_cap(self.transform, cap)
        self.num_heads, self.dropout, self.cap = num_heads, dropout, cap
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(kdim or embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(vdim or embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        for projection in (self.q_proj, self.k_proj, self.v_proj):  # as torch's layer does
            nn.init.xavier_uniform_(projection.weight)
        for projection in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if bias:
                nn.init.zeros_(projection.bias)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None, need_weights: bool = True,
        average_attn_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Attention of ``query [B, T, E]`` over ``key [B, S, kdim]`` / ``value [B, S, vdim]``.

        Masks as ``torch.nn.MultiheadAttention``'s: ``key_padding_mask [B, S]`` and
        ``attn_mask [T, S]`` or ``[B * H, T, S]``, each bool (True = may not attend) or float
        (added to the scores; ``-inf`` = may not attend). Masked keys get exactly 0.

        Returns:
            ``(output [B, T, E], weights)``: ``weights`` ``[B, T, S]`` averaged over the heads
            (``average_attn_weights``), ``[B, H, T, S]`` otherwise, None without
            ``need_weights``; taken before dropout, so that they obey the transform.
        """
        batch, heads = query.shape[0], self.num_heads
        q, k, v = (self.split_heads(projection(x)) for projection, x in (
            (self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        allowed, bias = None, None
        if key_padding_mask is not None:
            allowed, bias = split_mask(self.torch_convention(key_padding_mask)[:, None, None])
        if attn_mask is not None:
            if attn_mask.dim() == 3:
                attn_mask = attn_mask.view(batch, heads, *attn_mask.shape[1:])
            more_allowed, more_bias = split_mask(self.torch_convention(attn_mask))
            allowed = more_allowed if allowed is None else allowed & more_allowed
            bias = more_bias if bias is None else bias + more_bias
        out, weights = dot_product_attention(
            q, k, v, self.transform, allowed, bias, self.cap,
            dropout=self.dropout if self.training else 0.0)
        output = self.out_proj(out.transpose(1, 2).flatten(2))  # [B, T, E]
        if not need_weights:
            return output, None
        return output, weights.mean(1) if average_attn_weights else weights

    def split_heads(self, x: Tensor) -> Tensor:
        """``[B, L, E]`` -> ``[B, H, L, E / H]``."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    @staticmethod
    def torch_convention(mask: Tensor) -> Tensor:
        """A mask in torch's convention (bool True = may not attend; float added) in the one of
        :func:`split_mask` (bool True = may attend; float added)."""
        return ~mask if mask.dtype == torch.bool else mask
