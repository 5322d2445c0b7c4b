"""Neural easy-first taggers (Martins & Kreutzer 2017): NEF-S / NEF-F, their baselines and
ablations, with a softmax or linear-chain CRF output layer.

Alg. 2, vectorized over a padded batch. Each word has the state ``[h_i; s_i]`` (encoder state,
sketch; sketches start at 0). At step ``n`` the context ``c_i`` concatenates the states of words
``i, i-1..i-w, i+1..i+w`` (zeros outside the sentence; padding counts as outside), and

- ``z_i = v^T tanh(W_z c_i + b_z)`` (Eq. 2), ``alpha = rho(z; beta)`` (Eq. 3),
- NEF-S (Eq. 4): ``s_i += alpha_i tanh(W_s cbar + b_s)`` with ``cbar = sum_i alpha_i c_i``,
- NEF-F (Eq. 7): ``s_i += alpha_i tanh(W_s c_i + b_s)``,
- ``beta += alpha``;

then ``p_i = softmax(O [h_i; s_i^N] + o)`` (Eq. 6) or the same scores as the unaries of a CRF.

Every affine map of ``c_i`` is a 1-D convolution (kernel ``2w + 1``, zero padding) over the
masked states -- the same function as an affine map of the concatenated window, with the kernel
taps in place of the window slots. The part that reads the encoder states is computed once; each
step only convolves the sketches. For NEF-S, ``W_s cbar + b_s = sum_i alpha_i (W_s c_i + b_s) +
(1 - sum_i alpha_i) b_s`` (the last term is 0 where ``alpha`` sums to 1, not for ``sigmoid``).

The number of steps is capped at each sentence's length as the authors do: with ``steps="L"``
sentence ``b`` takes exactly ``L_b`` steps, with an integer ``N`` it takes ``min(N, L_b)``.
A sentence that has finished its steps is left unchanged by later steps of the batch (its
attention row is 0); this also keeps csoftmax and csparsemax feasible (their bounds
``1 - beta`` sum to ``L_b - n >= 1`` at every step a sentence takes).

Attention (``rho``) by name, the names of ``FAMILIES["easy_first"]`` in
:mod:`lit_structattn.layers.registry`: the transforms of :mod:`lit_structattn.attention`
(``softmax``, ``sparsemax``, ``sigmoid`` -- independent weights in (0, 1) that need not sum to
1 -- and the constrained ``csoftmax`` and ``csparsemax``, both with the bounds
``u = max(1 - beta, 0)``, the remaining fertility of every word), ``softmax_penalty``
(``softmax(z - lambda * beta)``), and the positional baselines ``uniform``, ``left_to_right``,
``right_to_left`` (step ``n`` attends one-hot to word ``n`` / ``L_b - 1 - n``) and ``vanilla``
(Alg. 1: one-hot on the uncovered word whose best output score
``max_y O [h_i; tanh(W_s c_i + b_s)] + o`` is highest; no gradient through the
choice). Where the paper and the authors' code differ, this module follows the paper: the
vanilla baseline ranks words by their best output *score* (the authors' code ranked by the best
*probability*, available as ``vanilla_criterion="probability"``) and uses the sketch map
``W_s`` (the authors' code reused the pre-attention map, forcing equal sizes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import Transform, get_transform
from ..common.checks import check_choice
from ..common.constants import very_negative
from ..common.masks import lengths_to_mask
from ..layers.registry import POSITIONAL, EasyFirstAttentionName, check_attention
from ..structured import LinearChainCRF
from .tagging_encoder import TaggingEncoder, TaggingEncoderOptions

__all__ = [
    "UPDATES",
    "EasyFirstDecoder",
    "EasyFirstDecoderOptions",
    "EasyFirstOutput",
    "EasyFirstTagger",
]

UPDATES = ("single", "full")  # NEF-S (Eq. 4), NEF-F (Eq. 7)
VANILLA_CRITERIA = ("score", "probability")
# the same names as types of the constructor arguments (the tuples stay the source of truth;
# the attention names are the registry's, typed registry.EasyFirstAttentionName)
UpdateName = Literal[UPDATES]
VanillaCriterion = Literal[VANILLA_CRITERIA]


Steps = int | str


def _check_steps(steps: Steps, allow_zero: bool) -> Steps:
    if steps == "L":
        return steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < (0 if allow_zero else 1):
        low = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"steps must be {low} integer or 'L', got {steps!r}")
    return steps


@dataclass
class EasyFirstOutput:
    """What :class:`EasyFirstTagger` returns.

    Attributes:
        scores: ``[B, T, K]`` emission (tag) scores; values at padded positions are meaningless.
        attention: ``[B, N_max, T]`` the attention of every sketch step (the "raindrop" plot);
            row ``n`` of sentence ``b`` is 0 when ``n >= steps[b]``, and padding is always 0.
        mask: ``[B, T]`` bool, True at real words.
        steps: ``[B]`` long, the number of sketch steps each sentence took.
        sketches: ``[B, T, D_s]`` the final sketches ``s^N`` (``None`` when ``N = 0``).
    """

    scores: Tensor
    attention: Tensor
    mask: Tensor
    steps: Tensor
    sketches: Tensor | None = None


@dataclass(frozen=True)
class EasyFirstDecoderOptions:
    """The sketch steps of an :class:`EasyFirstTagger` (its :class:`EasyFirstDecoder`). In a
    config they are the tagger's group ``decoder``:
    ``--model.init_args.model.init_args.decoder.steps 5``.

    Args:
        steps: ``N``: ``0`` (no sketches: the BiLSTM tagger), a positive integer, or ``"L"``
            (one step per word); capped at each sentence's length.
        attention: ``rho`` by name, one of ``registry.names("easy_first")``.
        update: ``"full"`` (NEF-F, Eq. 7) or ``"single"`` (NEF-S, Eq. 4).
        sketch_dim: sketch size ``D_s`` (paper: 50).
        preattention_dim: ``D_z`` of Eq. 2 (paper: 50); unused by the positional attentions.
        window: context half-width ``w`` (paper: 2).
        penalty: ``lambda`` of ``softmax_penalty``.
        vanilla_criterion: how ``vanilla`` ranks words: ``"score"`` (best output score, Alg. 1)
            or ``"probability"`` (best softmax probability, the authors' code).
    """

    steps: Steps = "L"
    attention: EasyFirstAttentionName = "csoftmax"
    update: UpdateName = "full"
    sketch_dim: int = 50
    preattention_dim: int = 50
    window: int = 2
    penalty: float = 1.0
    vanilla_criterion: VanillaCriterion = "score"


class EasyFirstDecoder(nn.Module):
    """The sketch steps of Alg. 2 over encoder states.

    Args:
        state_dim: size ``D_h`` of the encoder states ``h_i``.
        options: :class:`EasyFirstDecoderOptions`, with ``steps`` positive or ``"L"``.
    """

    def __init__(self, state_dim: int,
                 options: EasyFirstDecoderOptions = EasyFirstDecoderOptions()) -> None:
        super().__init__()
        attention, window = options.attention, options.window
        self.attention = check_attention("easy_first", "attention", attention)
        self.update = check_choice("update", options.update, UPDATES)
        self.vanilla_criterion = check_choice("vanilla_criterion", options.vanilla_criterion,
                                              VANILLA_CRITERIA)
        self.steps = _check_steps(options.steps, allow_zero=False)
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self.window, self.penalty = window, float(options.penalty)
        self.sketch_dim = sketch_dim = options.sketch_dim
        # the learned attentions: a transform of the scores z (softmax for softmax_penalty)
        self.transform: Transform | None = None
        if attention not in POSITIONAL:
            self.transform = get_transform("softmax" if attention == "softmax_penalty"
                                           else attention)
        self.preattention_dim = options.preattention_dim if self.transform is not None else 0
        out = self.preattention_dim + sketch_dim
        kernel = 2 * window + 1
        # [W_z; W_s] applied to the window of [h; s], split into the h part and the s part.
        self.state_map = nn.Conv1d(state_dim, out, kernel, padding=window)
        self.sketch_map = nn.Conv1d(sketch_dim, out, kernel, padding=window, bias=False)
        self.v = nn.Linear(self.preattention_dim, 1, bias=False) if self.preattention_dim else None
        bound = 1.0 / math.sqrt(kernel * (state_dim + sketch_dim))  # nn.Linear's default fan-in
        for weight in (self.state_map.weight, self.sketch_map.weight):
            nn.init.uniform_(weight, -bound, bound)
        nn.init.zeros_(self.state_map.bias)  # w_z and w_s start at 0, as in the authors' code

    def num_steps(self, lengths: Tensor, steps: Steps | None = None) -> Tensor:
        """``[B]`` the number of sketch steps of each sentence (``min(N, L_b)`` or ``L_b``)."""
        steps = self.steps if steps is None else _check_steps(steps, allow_zero=True)
        return lengths.clone() if steps == "L" else lengths.clamp(max=steps)

    def forward(
        self,
        states: Tensor,
        mask: Tensor,
        output: Callable[[Tensor, Tensor], Tensor] | None = None,
        steps: Steps | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Run the sketch steps.

        Args:
            states: ``[B, T, D_h]`` encoder states.
            mask: ``[B, T]`` bool, True at real words (a prefix of each row).
            output: ``(h [B, T, D_h], s [B, T, D_s]) -> [B, T, K]`` tag scores; needed by
                ``vanilla`` only.
            steps: overrides the constructor's ``steps`` for this call.

        Returns:
            ``(sketches [B, T, D_s], attention [B, N_max, T], num_steps [B])``.
        """
        lengths = mask.sum(-1)
        num_steps = self.num_steps(lengths, steps)
        batch, length, _ = states.shape
        valid = mask.to(states.dtype)
        states = states * valid[..., None]
        static = self.state_map(states.transpose(1, 2))  # [B, D_z + D_s, T]
        # Channels first inside the loop, the layout of the convolutions: no transposes.
        sketches = states.new_zeros(batch, self.sketch_dim, length)  # [B, D_s, T]
        beta = states.new_zeros(batch, length)
        positions = torch.arange(length, device=states.device)
        attention = []
        for n in range(int(num_steps.max()) if batch else 0):
            active = n < num_steps  # [B]
            # The sketches start at 0, where the bias-free sketch map is exactly 0.
            maps = static + self.sketch_map(sketches) if n else static  # [B, D_z + D_s, T]
            pre_z, pre_s = maps.split([self.preattention_dim, self.sketch_dim], dim=1)
            alpha = self._attend(n, pre_z, pre_s, beta, mask, active, lengths, positions,
                                 states, output)
            alpha = alpha * active[:, None].to(alpha.dtype)
            beta = beta + alpha
            if self.update == "full":
                sketches = sketches + alpha[:, None] * torch.tanh(pre_s)
            else:  # W_s cbar + b_s, whatever alpha sums to
                bias = self.state_map.bias[self.preattention_dim:]  # b_s [D_s]
                mass = alpha.sum(-1, keepdim=True)  # [B, 1]
                pooled = torch.tanh((alpha[:, None] * pre_s).sum(2) + (1 - mass) * bias)
                pooled = pooled[..., None]  # [B, D_s, 1]
                sketches = sketches + alpha[:, None] * pooled
            attention.append(alpha)
        if attention:
            attention_tensor = torch.stack(attention, dim=1)
        else:
            attention_tensor = states.new_zeros(batch, 0, length)
        return sketches.transpose(1, 2), attention_tensor, num_steps

    def _attend(
        self,
        n: int,
        pre_z: Tensor,
        pre_s: Tensor,
        beta: Tensor,
        mask: Tensor,
        active: Tensor,
        lengths: Tensor,
        positions: Tensor,
        states: Tensor,
        output: Callable[[Tensor, Tensor], Tensor] | None,
    ) -> Tensor:
        """``alpha^n [B, T]`` from the pre-activations ``pre_z [B, D_z, T]``, ``pre_s [B, D_s,
        T]`` (rows of finished sentences are zeroed by the caller)."""
        name = self.attention
        dtype = beta.dtype
        if self.transform is not None:
            z = (self.v.weight @ torch.tanh(pre_z)).squeeze(1)  # v^T tanh(.) [B, T]
            if name == "softmax_penalty":
                z = z - self.penalty * beta
            upper = None
            if self.transform.constrained:
                # finished rows get the (feasible) dummy bounds 1 and are zeroed later.
                upper = torch.where(active[:, None], (1 - beta).clamp_min(0),
                                    torch.ones_like(beta))
            return self.transform(z, upper, mask=mask)
        if name == "uniform":
            return mask.to(dtype) / lengths.clamp_min(1)[:, None].to(dtype)
        if name == "left_to_right":
            return (positions[None, :] == n).to(dtype) * mask
        if name == "right_to_left":
            return (positions[None, :] == (lengths - 1 - n)[:, None]).to(dtype)
        # vanilla easy-first: hard attention on the best uncovered word, no gradient.
        if output is None:
            raise ValueError("the vanilla attention needs the output layer (output=...)")
        with torch.no_grad():
            scores = output(states, torch.tanh(pre_s).transpose(1, 2))
            if self.vanilla_criterion == "probability":
                scores = torch.log_softmax(scores, dim=-1)
            best = scores.max(-1).values.to(dtype)
            free = mask & (beta < 0.5)
            best = best.masked_fill(~free, -math.inf)
            choice = best.argmax(-1)
            onehot = F.one_hot(choice, best.shape[-1]).to(dtype)
            return onehot * free.any(-1, keepdim=True).to(dtype)


class EasyFirstTagger(nn.Module):
    """Encoder + neural easy-first decoder + softmax or CRF output layer.

    ``decoder.steps=0`` is the plain BiLSTM tagger (features ``h_i``); otherwise the features
    are ``[h_i; s_i^N]`` (or ``s_i^N`` alone with ``concat=False``). Dropout (``dropout``) is
    applied after the embeddings, after the BiLSTM and to the features before the output layer,
    as in the paper.

    Args:
        vocab_size: word vocabulary size (0 = pad, 1 = unk).
        num_tags: ``K``, the tag vocabulary size including the padding tag.
        affix_vocab_size: size of the affix n-gram vocabulary (0 without affixes).
        source_vocab_size: size of the QE source-word vocabulary (0: no source words).
        encoder: the word encoder's sizes and inputs
            (:class:`~.tagging_encoder.TaggingEncoderOptions`).
        decoder: the sketch steps (:class:`EasyFirstDecoderOptions`; ``steps=0``: none).
        dropout: dropout probability (paper: 0.2 POS, 0.3 NER, 0.1 QE).
        concat: use ``[h_i; s_i^N]`` as features (Eq. 6); ``False`` is the "w/out concat"
            ablation.
        crf: a linear-chain CRF output layer (learned ``[K, K]`` transitions and start/end
            scores, all zero-initialised) instead of per-token softmax.
        pad_tag: the padding tag id (never predicted, ignored by the loss); ``None`` if the tag
            vocabulary has none.

    In a config the CLI links ``vocab_size``, ``num_tags``, ``affix_vocab_size`` and
    ``source_vocab_size`` from the tagging DataModule's attributes of those names; the parts'
    options are groups: ``--model.init_args.model.init_args.decoder.attention sparsemax``.
    """

    def __init__(
        self,
        vocab_size: int,
        num_tags: int,
        affix_vocab_size: int = 0,
        source_vocab_size: int = 0,
        *,
        encoder: TaggingEncoderOptions = TaggingEncoderOptions(),
        decoder: EasyFirstDecoderOptions = EasyFirstDecoderOptions(),
        dropout: float = 0.2,
        concat: bool = True,
        crf: bool = False,
        pad_tag: int | None = 0,
    ) -> None:
        super().__init__()
        steps = _check_steps(decoder.steps, allow_zero=True)
        if steps == 0 and not concat:
            raise ValueError("concat=False needs sketch steps (decoder.steps > 0): with steps=0 "
                             "the features are the encoder states")
        if pad_tag is not None and not 0 <= pad_tag < num_tags:
            raise ValueError(f"pad_tag {pad_tag} is not a tag id in [0, {num_tags})")
        self.concat, self.crf, self.num_tags, self.pad_tag = concat, crf, num_tags, pad_tag
        self.encoder = TaggingEncoder(vocab_size, affix_vocab_size, source_vocab_size, encoder,
                                      dropout)
        state_dim = self.encoder.output_dim
        self.decoder = EasyFirstDecoder(state_dim, decoder) if steps != 0 else None
        features = (state_dim if concat else 0) + (decoder.sketch_dim if steps != 0 else 0)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(features, num_tags)
        if crf:
            self.transition = nn.Parameter(torch.zeros(num_tags, num_tags))
            self.start = nn.Parameter(torch.zeros(num_tags))
            self.end = nn.Parameter(torch.zeros(num_tags))

    # ------------------------------------------------------------------ forward

    def _features(self, states: Tensor, sketches: Tensor | None) -> Tensor:
        if sketches is None:
            return states
        return torch.cat([states, sketches], dim=-1) if self.concat else sketches

    def _scores(self, features: Tensor) -> Tensor:
        scores = self.output(features)
        if self.pad_tag is not None:
            pad = torch.zeros(self.num_tags, dtype=torch.bool, device=scores.device)
            pad[self.pad_tag] = True
            scores = scores.masked_fill(pad, very_negative(scores.dtype))  # never predicted
        return scores

    def forward(
        self,
        words: Tensor,
        lengths: Tensor,
        prefixes: Tensor | None = None,
        suffixes: Tensor | None = None,
        aligned: Tensor | None = None,
        steps: Steps | None = None,
        caps: Tensor | None = None,
    ) -> EasyFirstOutput:
        """``words [B, T]``, ``lengths [B]``, ``prefixes``/``suffixes [B, T, 4]`` (affix ids),
        ``aligned [B, T, A]`` (QE source-word ids), ``caps [B, T]`` (capitalization classes)
        -> :class:`EasyFirstOutput`.

        ``steps`` overrides the number of sketch steps for this call (not for ``steps=0``
        models).
        """
        states, mask = self.encoder(words, lengths, prefixes, suffixes, aligned, caps)
        batch, length = words.shape
        if self.decoder is None:
            if steps not in (None, 0):
                raise ValueError("this tagger has no sketch decoder (steps=0)")
            attention = states.new_zeros(batch, 0, length)
            scores = self._scores(self.dropout(states))
            return EasyFirstOutput(scores, attention, mask, lengths.new_zeros(batch))
        if steps == 0:
            raise ValueError("steps=0 is a different model (no sketches); build it as such")
        sketches, attention, num_steps = self.decoder(
            states, mask, output=lambda h, s: self._scores(self._features(h, s)), steps=steps
        )
        scores = self._scores(self.dropout(self._features(states, sketches)))
        return EasyFirstOutput(scores, attention, mask, num_steps, sketches)

    # ------------------------------------------------------------------ loss and decoding

    def _unary(self, outputs: EasyFirstOutput, lengths: Tensor) -> Tensor:
        """CRF unaries ``[B, T, K]``: the scores with the start/end scores folded in."""
        unary = outputs.scores.to(self.transition.dtype)
        positions = torch.arange(unary.shape[1], device=unary.device)
        first = (positions == 0).to(unary.dtype)[None, :, None]
        last = (positions[None, :] == (lengths - 1)[:, None]).to(unary.dtype)[..., None]
        return unary + first * self.start + last * self.end

    def loss(
        self,
        outputs: EasyFirstOutput,
        tags: Tensor,
        lengths: Tensor | None = None,
        reduction: str = "mean",
        tag_weights: Tensor | None = None,
    ) -> Tensor:
        """Training loss of gold ``tags [B, T]`` (padded with ``pad_tag``; positions beyond
        ``lengths`` are ignored).

        Per sentence: the (weighted) sum of token cross-entropies, or ``-log p(tags)`` under the
        CRF. ``reduction``: ``"mean"`` over sentences (default), ``"sum"``, or ``"token_mean"``
        (divided by the number of tokens), or ``"none"`` (``[B]``).

        ``tag_weights [K]``: optional positive per-tag loss weights (QE: BAD 5; the task builds
        them from tag names). Without CRF they weight each token's cross-entropy; with CRF they
        become a softmax-margin cost: ``log w[gold_t]`` is added to the non-gold scores at
        token ``t`` (the authors' treatment).
        """
        check_choice("reduction", reduction, ("mean", "sum", "token_mean", "none"))
        if tag_weights is not None and tuple(tag_weights.shape) != (self.num_tags,):
            raise ValueError(f"tag_weights must have shape [{self.num_tags}] (one weight per "
                             f"tag), got {list(tag_weights.shape)}")
        mask = outputs.mask if lengths is None else lengths_to_mask(lengths, tags.shape[1])
        lengths = mask.sum(-1)
        tags = tags.masked_fill(~mask, 0 if self.pad_tag is None else self.pad_tag)
        if self.crf:
            unary = self._unary(outputs, lengths)
            if tag_weights is not None:
                cost = tag_weights.log()[tags].to(unary.dtype)  # [B, T]
                nongold = 1 - F.one_hot(tags, self.num_tags).to(unary.dtype)
                unary = unary + cost[..., None] * nongold * mask[..., None]
            chain = LinearChainCRF(unary, self.transition, lengths)
            per_sentence = -chain.log_prob(tags)
        else:
            nll = F.cross_entropy(outputs.scores.float().transpose(1, 2), tags, reduction="none")
            if tag_weights is not None:
                nll = nll * tag_weights[tags]
            per_sentence = (nll * mask).sum(-1)
        if reduction == "none":
            return per_sentence
        if reduction == "sum":
            return per_sentence.sum()
        if reduction == "token_mean":
            return per_sentence.sum() / mask.sum().clamp_min(1)
        return per_sentence.mean()

    def marginals(self, outputs: EasyFirstOutput, lengths: Tensor) -> Tensor:
        """``[B, T, K]`` every word's marginal distribution over the tags under the CRF output
        layer (the chain :meth:`predict` decodes; 0 beyond ``lengths [B]``). ``ValueError``
        without a CRF."""
        if not self.crf:
            raise ValueError("marginals need the CRF output layer (crf=True)")
        return LinearChainCRF(self._unary(outputs, lengths), self.transition, lengths).marginals

    @torch.no_grad()
    def predict(self, outputs: EasyFirstOutput, lengths: Tensor | None = None) -> Tensor:
        """``[B, T]`` long predicted tags (Viterbi with the CRF, else per-token argmax); the
        padding tag (0 if ``pad_tag`` is None) beyond each sentence."""
        mask = outputs.mask if lengths is None else lengths_to_mask(lengths,
                                                                    outputs.scores.shape[1])
        fill = 0 if self.pad_tag is None else self.pad_tag
        if self.crf:
            lengths = mask.sum(-1)
            best = LinearChainCRF(self._unary(outputs, lengths), self.transition, lengths).argmax
        else:
            best = outputs.scores.argmax(-1)
        return best.masked_fill(~mask, fill)
