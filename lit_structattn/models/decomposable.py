"""The decomposable attention model for natural language inference (Parikh et al. 2016) with the
intra-sentence variants of Kim et al. (2017, §4.4 and A.5).

Input representations: word vectors (fixed pretrained ones, or trained embeddings) projected by
a trained linear layer, ``x_i`` ``[B, N, H]``. Intra-sentence attention then concatenates each
word with a parent, ``x^_i = [x_i; sum_k p(k -> i) x_k]`` (``k = 0`` is a learned root vector):

* ``none``: ``x^_i = x_i`` (Parikh et al. without intra-sentence attention);
* ``simple``: ``p(k -> i)`` a softmax over the heads ``k`` of the parsing-layer scores;
* ``structured``: ``p(k -> i)`` the arc marginals of a projective dependency CRF over the same
  scores (syntactic attention); the parsing layer is shared by premise and hypothesis;
* ``hard_parent``: ``p(k -> i) = 1`` for the head in the Eisner parse of a supervised parser
  (frozen), ``x^_i = [x_i; x_head(i)]``;
* ``pretrained_structured``: ``structured`` with the parsing layer taken from a supervised
  parser (then trained on with the rest).

The parsing layer (:class:`~lit_structattn.models.parser.DependencyParser`) has its own word
embeddings, as the paper's (there initialised with GloVe), a BiLSTM and the arc MLP of A.1.

Attend: ``e_ij = F(x^_i)^T F(y^_j)``, ``beta_i = sum_j T_j(e_i.) y^_j``,
``alpha_j = sum_i T_i(e_.j) x^_i`` with the inter-sentence transform ``T`` (Parikh et al.:
softmax; any transform of :mod:`lit_structattn.attention` by name, see
:class:`DecomposableAttention`). Compare: ``G([x^_i; beta_i])``, ``G([y^_j; alpha_j])``.
Aggregate: sums over the words, ``H`` on their concatenation, a linear layer to the label
scores. ``F``, ``G``, ``H``: 2 layers of ReLU units with dropout before each layer.

Both attention roles take their names from the registry
(:data:`~lit_structattn.layers.registry.FAMILIES` ``["nli"]``): ``inter`` (between the
sentences) and ``intra`` (within each sentence).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..attention import get_transform
from ..common.masks import lengths_to_mask
from ..layers import registry
from .parser import DependencyParser, ParserOptions

#: The intra-sentence attentions that need a supervised parser (:meth:`DecomposableAttention.
#: attach_parser`).
SUPERVISED = ("hard_parent", "pretrained_structured")
#: The constrained inter-sentence transforms bound every position at ``INTER_BOUND / length``.
INTER_BOUND = 2.0


@dataclass
class DecomposableOutput:
    """``logits [B, C]``; ``premise_attention [B, N, M]`` (row i: premise word i's weights over
    the hypothesis words, a distribution for every inter transform but ``sigmoid``; 0 at
    padding), ``hypothesis_attention [B, M, N]``;
    ``premise_parents [B, N+1, N+1]`` / ``hypothesis_parents [B, M+1, M+1]``: ``p(k -> i)`` at
    ``[b, k, i]`` (index 0 = root), None for ``none``."""

    logits: Tensor
    premise_attention: Tensor
    hypothesis_attention: Tensor
    premise_parents: Tensor | None
    hypothesis_parents: Tensor | None


def mlp(input_dim: int, hidden_dim: int, dropout: float) -> nn.Sequential:
    """Dropout, linear, ReLU, twice: ``[..., input_dim] -> [..., hidden_dim]``."""
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(input_dim, hidden_dim), nn.ReLU(),
                         nn.Dropout(dropout), nn.Linear(hidden_dim, hidden_dim), nn.ReLU())


class DecomposableAttention(nn.Module):
    """Premise/hypothesis word ids -> label scores.

    Args:
        vocab_size: word ids ``0 .. vocab_size - 1`` (0 = padding).
        num_classes: labels.
        embed_dim: trained word vector size (ignored with ``vector_dim``).
        hidden_dim: size of the projection and of every MLP layer (paper: 300).
        intra: the intra-sentence attention, a name of ``registry.FAMILIES["nli"]["intra"]``
            (see the module docstring).
        dropout: before every MLP layer (paper: 0.2).
        vector_dim: the size of fixed input vectors (e.g. unit-norm GloVe) given by
            :meth:`load_vectors`; None: trained embeddings of ``embed_dim``.
        parser: the sizes of the parsing layer's word vectors and BiLSTM per direction
            (:class:`~.parser.ParserOptions`; paper: 300, 100), for ``simple`` /
            ``structured``, and of the supervised parser that :data:`SUPERVISED` variants
            attach (:meth:`attach_parser`) before they run.
        init_std: every trained weight starts from ``N(0, init_std^2)`` (paper: 0.01); None
            keeps PyTorch's default initialization. Trained word embeddings start from
            ``N(0, 1)`` either way, like the paper's out-of-vocabulary vectors.
        inter: the inter-sentence transform, a name of ``registry.FAMILIES["nli"]["inter"]``:
            ``softmax`` (Parikh et al.), ``sparsemax``, ``sigmoid`` (independent weights in
            (0, 1), not a distribution), or the constrained ``csoftmax`` / ``csparsemax``. The
            constrained ones get the uniform upper bound ``INTER_BOUND / length`` = ``2 / m``
            on each of the ``m`` hypothesis words a premise word attends to (``2 / n`` on the
            ``n`` premise words in the other direction). NLI has no fertility to predict
            (the bounds of the translation and tagging models come from fertilities or a
            coverage budget, which do not exist between two sentences), so every word of a
            sentence gets the same bound. At ``1 / m`` the bounds would sum to exactly 1 and
            force the uniform distribution; ``2 / m`` leaves the transform room to choose (the
            bounds sum to 2) while no word takes more than twice its uniform share, so a
            word's mass is spread over at least half of the other sentence. The factor 2 is a
            choice, not tuned. Padded positions get exactly 0 with every transform.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int = 3,
        embed_dim: int = 300,
        hidden_dim: int = 300,
        intra: registry.IntraAttentionName = "none",
        dropout: float = 0.2,
        vector_dim: int | None = None,
        parser: ParserOptions = ParserOptions(),
        init_std: float | None = 0.01,
        inter: registry.InterAttentionName = "softmax",
    ) -> None:
        super().__init__()
        registry.check_attention("nli", "intra", intra)
        self.inter = get_transform(registry.check_attention("nli", "inter", inter))
        self.intra, self.parser_options = intra, parser
        if vector_dim is None:
            self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        else:  # fixed vectors, given by load_vectors (no random draw for them here)
            self.embedding = nn.Embedding(vocab_size, vector_dim, padding_idx=0,
                                          _weight=torch.zeros(vocab_size, vector_dim),
                                          _freeze=True)
        self.project = nn.Linear(self.embedding.embedding_dim, hidden_dim)
        features = hidden_dim if intra == "none" else 2 * hidden_dim
        self.root = nn.Parameter(torch.zeros(hidden_dim)) if intra != "none" else None
        self.parser = None
        if intra in ("simple", "structured"):
            self.parser = DependencyParser(vocab_size, parser, mode=intra)
        self.attend = mlp(features, hidden_dim, dropout)
        self.compare = mlp(2 * features, hidden_dim, dropout)
        self.aggregate = mlp(2 * hidden_dim, hidden_dim, dropout)
        self.out = nn.Linear(hidden_dim, num_classes)
        self._initialize(init_std)
        self.register_buffer("parser_ids", None)  # [vocab_size], with a supervised parser

    def _initialize(self, std: float | None) -> None:
        embeddings = [self.embedding] + ([self.parser.embedding] if self.parser else [])
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if std is not None and parameter.requires_grad and not name.endswith(
                        "embedding.weight"):
                    parameter.normal_(0.0, std)
            for embedding in embeddings:
                if embedding.weight.requires_grad:
                    embedding.weight.normal_()
                    embedding.weight[0] = 0

    def load_vectors(self, vectors: Tensor) -> None:
        """Give the fixed input vectors ``[vocab_size, vector_dim]``; a trained parsing layer
        whose word vectors have their size starts from them too."""
        fixed = self.embedding.weight
        if fixed.requires_grad or vectors.shape != fixed.shape:
            expected = "trained embeddings" if fixed.requires_grad else tuple(fixed.shape)
            raise ValueError(f"vectors of shape {tuple(vectors.shape)} for a model with "
                             f"{expected}: set vector_dim to their size")
        with torch.no_grad():
            self.embedding.weight.copy_(vectors)
            parser = self.parser.embedding.weight if self.parser is not None else None
            if parser is not None and parser.requires_grad and parser.shape == vectors.shape:
                parser.copy_(vectors)
                parser[0] = 0

    def attach_parser(self, parser: DependencyParser, parser_ids: Tensor) -> None:
        """Attach the supervised parser of a :data:`SUPERVISED` variant (its own vocabulary,
        the sizes :attr:`parser_options`) and ``parser_ids [vocab_size]``
        (long), the parser-vocabulary id of every word id; both are saved with the model.
        ``hard_parent`` keeps the parser fixed, ``pretrained_structured`` trains it on."""
        if self.intra not in SUPERVISED:
            raise ValueError(f"intra={self.intra!r} has no supervised parser to attach")
        self.parser = parser
        self.parser_ids = parser_ids
        if self.intra == "hard_parent":
            self.parser.requires_grad_(False)

    def parser_word_ids(self, words: Tensor) -> Tensor:
        """``words [B, N]`` as ids of the parsing layer's vocabulary (the same ids unless a
        supervised parser brought its own)."""
        return words if self.parser_ids is None else self.parser_ids[words]

    def represent(self, words: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor | None]:
        """``(x^ [B, N, F], p(k -> i) [B, N+1, N+1] or None)`` for ``words [B, N]`` with
        ``lengths [B]``; ``F`` is ``hidden_dim``, doubled with a parent."""
        x = self.project(self.embedding(words))  # [B, N, H]
        if self.intra == "none":
            return x, None
        if self.parser is None:
            raise RuntimeError(f"intra={self.intra!r} needs its supervised parser: "
                               "attach_parser first")
        ids = self.parser_word_ids(words)
        if self.intra == "hard_parent":
            size = words.shape[1] + 1
            heads = self.parser.parse(ids, lengths)  # [B, N+1]
            is_word = (torch.arange(size, device=words.device) > 0) & lengths_to_mask(
                lengths + 1, size)
            parents = nn.functional.one_hot(heads, size).transpose(1, 2) * is_word[:, None, :]
            parents = parents.to(x.dtype)
        else:
            parents = self.parser.marginals(ids, lengths)
        nodes = torch.cat([self.root.to(x.dtype).expand(len(x), 1, -1), x], dim=1)  # [B, N+1, H]
        soft_parent = parents.transpose(1, 2)[:, 1:] @ nodes  # sum_k p(k -> i) x_k, [B, N, H]
        return torch.cat([x, soft_parent], dim=-1), parents

    def attention(self, scores: Tensor, pairs: Tensor, lengths: Tensor, dim: int) -> Tensor:
        """The inter-sentence transform of ``scores [B, N, M]`` over ``dim`` (2: each premise
        word over the hypothesis words, 1: each hypothesis word over the premise words), 0
        where ``pairs [B, N, M]`` (bool) is False; ``lengths [B]`` are the lengths of the
        sentence attended to (for the bounds ``INTER_BOUND / length`` of the constrained
        transforms)."""
        upper = None
        if self.inter.constrained:
            upper = (INTER_BOUND / lengths.clamp(min=1)).to(scores.dtype)[:, None, None]
        return self.inter(scores, upper, dim=dim, mask=pairs)

    def forward(self, premise: Tensor, premise_lengths: Tensor, hypothesis: Tensor,
                hypothesis_lengths: Tensor) -> DecomposableOutput:
        """``premise [B, N]`` and ``hypothesis [B, M]`` word ids (0 = padding) with their
        lengths ``[B]`` -> :class:`DecomposableOutput`."""
        a, a_parents = self.represent(premise, premise_lengths)  # [B, N, F]
        b, b_parents = self.represent(hypothesis, hypothesis_lengths)  # [B, M, F]
        a_mask = lengths_to_mask(premise_lengths, premise.shape[1])  # [B, N]
        b_mask = lengths_to_mask(hypothesis_lengths, hypothesis.shape[1])  # [B, M]
        pairs = a_mask[:, :, None] & b_mask[:, None, :]  # [B, N, M]
        scores = self.attend(a) @ self.attend(b).transpose(1, 2)  # e_ij, [B, N, M]
        to_hypothesis = self.attention(scores, pairs, hypothesis_lengths, dim=2)  # [B, N, M]
        to_premise = self.attention(scores, pairs, premise_lengths, dim=1).mT  # [B, M, N]
        beta = to_hypothesis @ b  # [B, N, F]
        alpha = to_premise @ a  # [B, M, F]
        v1 = (self.compare(torch.cat([a, beta], -1)) * a_mask[..., None]).sum(1)  # [B, H]
        v2 = (self.compare(torch.cat([b, alpha], -1)) * b_mask[..., None]).sum(1)  # [B, H]
        logits = self.out(self.aggregate(torch.cat([v1, v2], -1)))  # [B, C]
        return DecomposableOutput(logits, to_hypothesis, to_premise, a_parents, b_parents)
