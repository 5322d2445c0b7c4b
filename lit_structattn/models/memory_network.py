"""Memory networks for bAbI question answering (Kim et al. 2017, §4.3 and A.4).

* :class:`MemN2N` — the end-to-end memory network of Sukhbaatar et al. (2015): K greedy hops of
  attention over the facts, ``q^{k+1} = q^k + c^k``, answer ``softmax(W(q^K + c^K))``; each hop
  attends with a transform of :mod:`lit_structattn.attention` (``softmax``, the paper's, or
  ``sparsemax``).
* :class:`ChainCRFMemory` — the unary and binary CRF models: one K-step chain over the n facts
  (:class:`~lit_structattn.layers.chain_over_facts.ChainAttention`), ``q^{k+1} = Q q^k``, one
  context vector ``c = sum_k sum_i p(z_k = i) o_i^k`` and answer ``softmax(W(q^K + c))``.

The model family takes its attention by name from the registry
(:data:`~lit_structattn.layers.registry.FAMILIES` ``["memory_network"]``: ``softmax``,
``sparsemax``, ``unary_crf``, ``binary_crf``); :func:`build_memory_model` builds the model of a
name. A config names the class and its argument instead (``configs/babi/rows/``: ``MemN2N``
with ``transform: softmax | sparsemax``, ``ChainCRFMemory`` with ``binary: false | true``).

Shared by all of them (A.4): bag-of-words sentence embeddings with position encoding (see
:func:`position_encoding`), temporal encoding (a learned vector per memory age, the
newest fact has age 0), adjacent weight tying (``K + 1`` embedding matrices ``E_0 .. E_K``: hop
k reads its keys ``x^k`` from ``E_{k-1}`` and its values ``o^k`` from ``E_k``, the query from
``E_0`` and the answer layer is ``W = E_K^T``; the temporal tables are tied the same way),
random noise (in training, each fact's age grows by the number of empty memories inserted after
it, each with probability ``temporal_noise``, as Sukhbaatar et al.'s "RN"; A.4 lists only PE, TE
and linear start, but RN is part of the MemN2N set-up it follows), and Gaussian initialization
with ``init_std`` (0.1 as Sukhbaatar et al.; the authors' Lua code used 1/sqrt(10)). How RN and
the initialization fared in development runs: ``reports/development_notes.md``.

Inputs (word id 0 = padding)::

    story [B, n, L], story_lengths [B], sentence_lengths [B, n], query [B, L'], query_lengths [B]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import get_transform
from ..common.checks import check_choice
from ..common.constants import very_negative
from ..layers import registry
from ..layers.chain_over_facts import ChainAttention

#: The attention names of the family that are transforms per hop (:class:`MemN2N`); the others
#: are the chains over facts (:class:`ChainCRFMemory`).
HOP_TRANSFORMS = tuple(name for name in registry.names("memory_network")
                       if name in registry.TRANSFORM_NAMES)
HopTransformName = Literal[HOP_TRANSFORMS]  # the names as the type of the constructor argument


@dataclass
class MemoryOutput:
    """``logits [B, V]`` over the vocabulary, ``attention [B, K, n]`` (p(z_k = i), 0 on padded
    facts; during linear start the MemN2N's unnormalized weights), ``fact_sequence [B, K]``
    (the selected slot per step: per-hop argmax for MemN2N, the most likely sequence for the
    CRFs; None in training mode, where it is not computed) and, for the binary CRF,
    ``edge_marginals [B, K-1, n, n]`` (p(z_k = i, z_{k+1} = j))."""

    logits: Tensor
    attention: Tensor
    fact_sequence: Tensor | None
    edge_marginals: Tensor | None = None


def position_encoding(lengths: Tensor, width: int, dim: int) -> Tensor:
    """``[*, width, dim]`` weights ``1 + 4 (d - (D+1)/2) (j - (J+1)/2) / (D J)`` for the 1-based
    word j of a sentence of ``J = lengths[*]`` words and the 1-based dimension d of ``D = dim``;
    0 beyond the length.

    This is the form of the MemN2N authors' code (Sukhbaatar et al.'s bAbI release, with J the
    sentence's own length here). It is the paper's ``(1 - j/J) - (d/D)(1 - 2j/J)`` centred and
    doubled (equal to twice it up to O(1/D + 1/J) terms). The scale matters: in development runs
    MemN2N learned bAbI task 16 with these weights (and linear start), not with the paper's
    printed ones (``reports/development_notes.md``).

    Args:
        lengths: ``[*]`` integer sentence lengths.
    """
    j = torch.arange(1, width + 1, device=lengths.device, dtype=torch.float32)[:, None]
    d = torch.arange(1, dim + 1, device=lengths.device, dtype=torch.float32)
    length = lengths.clamp(min=1).float()[..., None, None]  # [*, 1, 1]
    weights = 1 + 4 * (d - (dim + 1) / 2) * (j - (length + 1) / 2) / (dim * length)
    return weights * (j <= lengths[..., None, None])


class _MemoryEmbeddings(nn.Module):
    """The ``K + 1`` tied word-embedding and temporal-embedding matrices and the sentence/query
    encodings built from them."""

    def __init__(self, vocab_size: int, hops: int, embed_dim: int, memory_size: int,
                 temporal_noise: float, init_std: float) -> None:
        super().__init__()
        if hops < 1:
            raise ValueError(f"hops must be >= 1, got {hops}")
        self.hops, self.embed_dim, self.memory_size = hops, embed_dim, memory_size
        self.temporal_noise = temporal_noise
        self.words = nn.Parameter(torch.randn(vocab_size, hops + 1, embed_dim) * init_std)
        self.ages = nn.Parameter(torch.randn(memory_size, hops + 1, embed_dim) * init_std)
        self.register_buffer("linear_start_on", torch.tensor(False))

    @property
    def vocab_size(self) -> int:
        return self.words.shape[0]

    @property
    def linear_start(self) -> bool:
        """Whether the model runs in its linear-start mode (saved in checkpoints)."""
        return bool(self.linear_start_on)

    @linear_start.setter
    def linear_start(self, on: bool) -> None:
        self.linear_start_on.fill_(on)

    def memories(self, story: Tensor, story_lengths: Tensor, sentence_lengths: Tensor) -> Tensor:
        """``[B, K+1, n, D]``: fact i embedded with every matrix ``E_k`` (position encoding plus
        the temporal vector of its age); exactly 0 for padded facts."""
        batch, slots, width = story.shape
        vectors = F.embedding(story, self.words.flatten(1))  # [B, n, L, (K+1) D]
        vectors = vectors.view(batch, slots, width, self.hops + 1, self.embed_dim)
        weights = position_encoding(sentence_lengths, width, self.embed_dim)  # [B, n, L, D]
        sentences = (vectors * weights[:, :, :, None]).sum(2)  # [B, n, K+1, D]
        slot = torch.arange(slots, device=story.device)
        real = slot < story_lengths[:, None]  # [B, n]
        age = (story_lengths[:, None] - 1 - slot).clamp(min=0)  # newest fact: age 0
        if self.training and self.temporal_noise > 0:
            inserted = (torch.rand(real.shape, device=story.device) < self.temporal_noise) & real
            age = age + inserted.flip(1).cumsum(1).flip(1)  # empty memories after each fact
        age = age.clamp(max=self.memory_size - 1)
        temporal = F.embedding(age, self.ages.flatten(1)).view_as(sentences)  # [B, n, K+1, D]
        return ((sentences + temporal) * real[..., None, None]).transpose(1, 2)

    def query(self, query: Tensor, query_lengths: Tensor) -> Tensor:
        """``[B, D]``: the question embedded with ``E_0`` and position encoding."""
        vectors = F.embedding(query, self.words[:, 0])  # [B, L', D]
        weights = position_encoding(query_lengths, query.shape[1], self.embed_dim)
        return (vectors * weights).sum(1)

    def answer_logits(self, state: Tensor) -> Tensor:
        """``[B, V]`` scores ``W state`` with ``W = E_K^T``; ``state [B, D]``."""
        return state @ self.words[:, self.hops].T


class MemoryNetwork(nn.Module):
    """What the memory networks share: the tied embeddings (``embeddings``, built from
    ``vocab_size``, ``hops`` K, ``embed_dim`` D, ``memory_size``, ``temporal_noise`` and
    ``init_std``) and ``forward(story, story_lengths, sentence_lengths, query, query_lengths)
    -> MemoryOutput`` (shapes in the module docstring)."""

    def __init__(self, vocab_size: int, hops: int = 3, embed_dim: int = 20,
                 memory_size: int = 25, temporal_noise: float = 0.1,
                 init_std: float = 0.1) -> None:
        super().__init__()
        self.embeddings = _MemoryEmbeddings(vocab_size, hops, embed_dim, memory_size,
                                            temporal_noise, init_std)


class MemN2N(MemoryNetwork):
    """End-to-end memory network, K hops (A.4).

    Hop k attends over the facts with ``transform(x_i^k . q^k)`` over the real facts (padded
    facts get exactly 0): ``softmax`` is Sukhbaatar et al.'s model, ``sparsemax`` its sparse
    counterpart (a hop may then put all its mass on one fact, or share it among a few).

    Linear start: while ``linear_start`` is True the attention of every hop is the raw score
    ``x_i^k . q^k`` (0 on padded facts) instead of its transform.

    Args:
        vocab_size, hops (K), embed_dim (D = 20 in the paper), memory_size (most facts, 25),
        temporal_noise (probability of an empty memory, 0.1), init_std (0.1, as Sukhbaatar et
        al.).
        transform: one of :data:`HOP_TRANSFORMS` (``softmax``, ``sparsemax`` or ``entmax15``).
    """

    def __init__(self, vocab_size: int, hops: int = 3, embed_dim: int = 20,
                 memory_size: int = 25, temporal_noise: float = 0.1,
                 init_std: float = 0.1, transform: HopTransformName = "softmax") -> None:
        super().__init__(vocab_size, hops, embed_dim, memory_size, temporal_noise, init_std)
        self.transform = get_transform(check_choice("memory network hop transform", transform,
                                                    HOP_TRANSFORMS))

    def forward(self, story: Tensor, story_lengths: Tensor, sentence_lengths: Tensor,
                query: Tensor, query_lengths: Tensor) -> MemoryOutput:
        """Answer scores and attention for a batch (shapes in the module docstring)."""
        emb = self.embeddings
        memories = emb.memories(story, story_lengths, sentence_lengths)  # [B, K+1, n, D]
        real = torch.arange(story.shape[1], device=story.device) < story_lengths[:, None]
        state = emb.query(query, query_lengths)  # q^1 [B, D]
        hops = []
        for k in range(emb.hops):
            scores = (memories[:, k] @ state[:, :, None]).squeeze(-1)  # [B, n]
            if emb.linear_start:
                attention = scores * real
            else:
                attention = self.transform(scores, mask=real)
            state = state + (attention[:, None, :] @ memories[:, k + 1]).squeeze(1)  # q^{k+1}
            hops.append(attention)
        attention = torch.stack(hops, 1)  # [B, K, n]
        fact_sequence = None if self.training else _best_per_step(attention, real)
        return MemoryOutput(emb.answer_logits(state), attention, fact_sequence)


class ChainCRFMemory(MemoryNetwork):
    """The unary (``binary=False``) or binary CRF model of A.4.

    Step k scores fact i by ``theta_k(i) = x_i^k . q^k`` with ``q^{k+1} = Q q^k``. The unary
    model uses these as the chain's unary potentials (no pairwise ones: the steps are
    independent). The binary model uses the pairwise potentials
    ``theta_{k,k+1}(i, j) = theta_k(i) + o_i^k . x_j^{k+1} + theta_{k+1}(j)`` with
    ``theta_{k,k+1}(i, i) = -inf`` (no fact twice in a row), plus ``theta_1`` on the first step
    and ``theta_K`` on the last (the potentials of the authors' start and end transitions,
    ``u^T m_i`` and ``u_2^T c_j`` in their train-qa.lua). A.4 prints the middle term as
    ``x_i^k . x_j^{k+1}``; here it is the value of fact i at step k, as MemN2N's hop k+1 reads
    ``x_j^{k+1} . (q^k + o^k)``, so that the link is the one the linear start (below) trains
    (with A.4's term, development runs lost bAbI task 16 at the switch from the linear start:
    ``reports/development_notes.md``).

    Linear start (A.4: "All models implement ... linear start from the original paper"; "for the
    CRF models we apply a log(softmax) layer ... after 20 epochs"). Binary model: while
    ``linear_start`` is True the chain is replaced by its linear counterpart, MemN2N's hops with
    the softmax removed: the step marginals are the unnormalized forward scores ``alpha_1 =
    theta_1``, ``alpha_{k+1}(j) = theta_{k+1}(j) + sum_{i != j} alpha_k(i) o_i^k . x_j^{k+1}``
    (MemN2N's linear hop ``x_j^{k+1} . (q^k + c^k)`` with ``Q q^k`` in place of ``q^k``; ``o^k``
    and ``x^{k+1}`` are one matrix under adjacent tying). This is what lets the binary CRF learn
    bAbI task 16, which it did not with the CRF on raw potentials in linear start (its results:
    ``reports/babi_qa.md``; the runs without it: ``reports/development_notes.md``). Afterwards the
    potentials are log-normalized where the authors' code inserts its LogSoftMax layers: every
    transition row ``theta_{k,k+1}(i, .)`` becomes a log-distribution over the next fact j, and the
    first and last steps' potentials log-distributions over the facts: a locally normalized chain
    (which the CRF then renormalizes globally). Unary model: in linear start the chain's linear
    counterpart likewise, which without links is the raw potentials ``alpha_k = theta_k`` (MemN2N's
    linear hops ``x_i^k . q^k``, with ``Q q^k`` in place of ``q^k``); afterwards the CRF over a
    log-softmax per step (as in the authors' code; the softmax leaves the chain's distribution
    unchanged in exact arithmetic). Until 2026-11-26 the unary model ran the CRF on raw potentials
    in linear start too, i.e. no linear start.

    Args:
        vocab_size, hops (K, >= 2 for the binary model), embed_dim, memory_size,
        temporal_noise, init_std: as for :class:`MemN2N`.
        binary: pairwise potentials (True) or unary ones (False).
    """

    def __init__(self, vocab_size: int, hops: int = 3, embed_dim: int = 20,
                 memory_size: int = 25, temporal_noise: float = 0.1, init_std: float = 0.1,
                 binary: bool = True) -> None:
        if binary and hops < 2:
            raise ValueError("the binary CRF model needs hops >= 2 (pairwise potentials link "
                             "consecutive steps)")
        super().__init__(vocab_size, hops, embed_dim, memory_size, temporal_noise, init_std)
        self.query_map = nn.Parameter(torch.randn(embed_dim, embed_dim) * init_std)  # Q
        self.binary = binary
        self.chain = ChainAttention(forbid_repeat=binary)

    def forward(self, story: Tensor, story_lengths: Tensor, sentence_lengths: Tensor,
                query: Tensor, query_lengths: Tensor) -> MemoryOutput:
        """Answer scores, marginals and edge marginals for a batch (shapes in the module
        docstring)."""
        emb = self.embeddings
        memories = emb.memories(story, story_lengths, sentence_lengths)  # [B, K+1, n, D]
        keys, values = memories[:, :-1], memories[:, 1:]  # x^k, o^k: [B, K, n, D]
        real = torch.arange(story.shape[1], device=story.device) < story_lengths[:, None]
        queries = [emb.query(query, query_lengths)]
        for _ in range(emb.hops - 1):
            queries.append(queries[-1] @ self.query_map.T)  # q^{k+1} = Q q^k
        queries = torch.stack(queries, 1)  # [B, K, D]
        theta = (keys @ queries[..., None]).squeeze(-1)  # [B, K, n]
        if not self.binary:
            if emb.linear_start:  # the chain's linear counterpart: the raw potentials
                attention, edge_marginals = theta * real[:, None], None
                fact_sequence = _best_per_step(attention, real)
            else:
                chain = self.chain(_log_normalize(theta, real[:, None]), None, real)
                attention, fact_sequence, edge_marginals = chain.marginals, chain.argmax, None
        else:
            links = values[:, :-1] @ keys[:, 1:].transpose(-1, -2)  # o_i^k . x_j^{k+1}
            if emb.linear_start:
                attention = _linear_chain(theta, links, real)
                fact_sequence, edge_marginals = _best_per_step(attention, real), None
            else:  # theta_k(i) is constant in each row: the row normalization drops it
                repeat = torch.eye(real.shape[1], dtype=torch.bool, device=real.device)
                pairwise = _log_normalize(links + theta[:, 1:, None, :],
                                          real[:, None, None, :] & ~repeat)
                ends = _log_normalize(theta[:, ::emb.hops - 1], real[:, None, :])  # 1st, last
                unary = torch.cat([ends[:, :1], torch.zeros_like(theta[:, 1:-1]), ends[:, 1:]],
                                  1)
                chain = self.chain(unary, pairwise, real)
                attention, fact_sequence = chain.marginals, chain.argmax
                edge_marginals = chain.edge_marginals
        context = torch.einsum("bkn,bknd->bd", attention, values)  # c [B, D]
        logits = emb.answer_logits(queries[:, -1] + context)
        return MemoryOutput(logits, attention, None if self.training else fact_sequence,
                            edge_marginals)


def _best_per_step(attention: Tensor, real: Tensor) -> Tensor:
    """``[B, K]`` the most attended real fact per step of ``attention [B, K, n]``; ``real
    [B, n]`` (bool)."""
    return attention.masked_fill(~real[:, None], float("-inf")).argmax(-1)


def _linear_chain(theta: Tensor, links: Tensor, real: Tensor) -> Tensor:
    """``[B, K, n]`` unnormalized forward scores ``alpha_1 = theta_1``, ``alpha_{k+1}(j) =
    theta_{k+1}(j) + sum_{i != j} alpha_k(i) links_k(i, j)``, 0 on padded facts; ``theta
    [B, K, n]``, ``links [B, K-1, n, n]``, ``real [B, n]`` (bool)."""
    theta = theta * real[:, None]
    links = links * ~torch.eye(real.shape[1], dtype=torch.bool, device=real.device)
    alphas = [theta[:, 0]]
    for k in range(links.shape[1]):
        alphas.append(theta[:, k + 1] + (alphas[-1][:, None, :] @ links[:, k]).squeeze(1))
    return torch.stack(alphas, 1)


def _log_normalize(scores: Tensor, allowed: Tensor) -> Tensor:
    """``scores`` log-softmaxed over the last dimension among the ``allowed`` entries (bool,
    broadcast to ``scores``); the others get
    :func:`~lit_structattn.common.constants.very_negative`."""
    return scores.masked_fill(~allowed, very_negative(scores.dtype)).log_softmax(-1)


def build_memory_model(attention: registry.MemoryAttentionName, vocab_size: int,
                       **kwargs) -> MemoryNetwork:
    """The memory network attending with ``attention`` (a name of
    ``registry.FAMILIES["memory_network"]["attention"]``; ``ValueError`` listing them
    otherwise): :class:`MemN2N` for a transform per hop (``softmax``, ``sparsemax``),
    :class:`ChainCRFMemory` for ``unary_crf`` / ``binary_crf``; ``kwargs`` are the sizes."""
    registry.check_attention("memory_network", "attention", attention)
    if attention in HOP_TRANSFORMS:
        return MemN2N(vocab_size, transform=attention, **kwargs)
    return ChainCRFMemory(vocab_size, binary=attention == "binary_crf", **kwargs)
