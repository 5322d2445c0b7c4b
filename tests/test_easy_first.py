"""Neural easy-first taggers: shapes, masking invariance for every attention of the registry's
easy_first family and every update, the attention constraints (simplex rows, the upper bounds of
csoftmax and csparsemax, fixed orders, vanilla coverage), NEF-S with weights that do not sum to 1,
the BiLSTM special case, losses and a few training steps, parameters drawn in float64; the task's
loss weights by tag name. (The pretrained-vector loader, now on the data side, is tested in
tests/test_vectors.py.)"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import get_type_hints

import pytest
import torch
import torch.nn.functional as F

from lit_structattn.common.constants import very_negative
from lit_structattn.layers import registry
from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger
from lit_structattn.models.tagging_encoder import TaggingEncoder, TaggingEncoderOptions

ATTENTIONS = registry.names("easy_first")
#: the names whose every step is a distribution over the words (sigmoid's weights are not)
NORMALIZED = tuple(name for name in ATTENTIONS if name != "sigmoid")
CONSTRAINED = ("csoftmax", "csparsemax", "centmax15")

VOCAB, AFFIXES, SOURCE, TAGS = 30, 40, 20, 6
SMALL = dict(word_dim=8, affix_dim=6, source_dim=5, hidden_dim=5, sketch_dim=6,
             preattention_dim=7)


def grouped(**options):
    """The tagger's keyword arguments for ``options`` given flat: those of the encoder and of
    the decoder in their options objects (``encoder``, ``decoder``), the others as they are."""
    groups = {"encoder": TaggingEncoderOptions, "decoder": EasyFirstDecoderOptions}
    for group, cls in groups.items():
        names = {field.name for field in fields(cls)}
        options[group] = cls(**{name: options.pop(name) for name in names & set(options)})
    return options


def make_tagger(seed=0, **kwargs):
    torch.manual_seed(seed)
    return EasyFirstTagger(VOCAB, TAGS, AFFIXES, **grouped(**SMALL, dropout=0.0, **kwargs)).eval()


def make_batch(lengths, extra=0, seed=1, aligned=False):
    """A padded batch (ids 0 at padding) with ``extra`` columns of padding beyond the longest."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    batch, length = len(lengths), int(lengths.max()) + extra
    mask = torch.arange(length)[None, :] < lengths[:, None]
    words = torch.randint(1, VOCAB, (batch, length), generator=generator) * mask
    prefixes = torch.randint(0, AFFIXES, (batch, length, 4), generator=generator) * mask[..., None]
    suffixes = torch.randint(0, AFFIXES, (batch, length, 4), generator=generator) * mask[..., None]
    tags = torch.randint(1, TAGS, (batch, length), generator=generator) * mask
    out = dict(words=words, lengths=lengths, prefixes=prefixes, suffixes=suffixes)
    if aligned:
        out["aligned"] = torch.randint(0, SOURCE, (batch, length, 3), generator=generator) \
            * mask[..., None]
    return out, tags


def select(batch, b):
    """Sentence ``b`` of ``batch`` alone, cut to its length."""
    n = int(batch["lengths"][b])
    return {k: (v[b:b + 1] if k == "lengths" else v[b:b + 1, :n]) for k, v in batch.items()}


LENGTHS = [5, 2, 7, 1]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread is faster and immune to a busy machine's stalls."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_names_and_types_are_the_registrys():
    assert get_type_hints(EasyFirstDecoderOptions)["attention"] == registry.EasyFirstAttentionName
    assert {"csparsemax", "sigmoid"} <= set(ATTENTIONS)
    for name in ATTENTIONS:  # learned attentions score the words, positional ones do not
        decoder = make_tagger(attention=name, steps=2).decoder
        assert (decoder.v is None) == (name in registry.POSITIONAL), name


def test_shapes():
    batch, _ = make_batch(LENGTHS, extra=2)
    model = make_tagger(steps=3)
    out = model(**batch)
    assert out.scores.shape == (4, 9, TAGS)
    assert out.attention.shape == (4, 3, 9)
    assert out.sketches.shape == (4, 9, 6)
    assert out.steps.tolist() == [3, 2, 3, 1]
    out = make_tagger(steps="L")(**batch)
    assert out.attention.shape == (4, 7, 9)
    assert out.steps.tolist() == LENGTHS


@pytest.mark.parametrize("steps", [3, "L"])
@pytest.mark.parametrize("update", ["full", "single"])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_masking_invariance_and_simplex(attention, update, steps):
    batch, _ = make_batch(LENGTHS, extra=2)
    model = make_tagger(attention=attention, update=update, steps=steps, penalty=2.0)
    with torch.no_grad():
        out = model(**batch)
    mask = out.mask
    for b, n in enumerate(LENGTHS):
        alone = model(**select(batch, b))
        taken = int(out.steps[b])
        assert taken == (n if steps == "L" else min(steps, n))
        torch.testing.assert_close(out.scores[b, :n], alone.scores[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.attention[b, :taken, :n], alone.attention[0],
                                   atol=1e-5, rtol=1e-5)
        assert torch.all(out.attention[b, taken:] == 0)
    # every step a sentence takes is a distribution over its words (sigmoid: weights in
    # [0, 1]), exactly 0 at padding
    att = out.attention
    assert torch.all(att >= 0) and torch.all(att <= 1 + 1e-6)
    assert torch.all(att.masked_select(~mask[:, None, :].expand_as(att)) == 0)
    taken = torch.arange(att.shape[1])[None, :] < out.steps[:, None]
    sums = att.sum(-1)
    if attention in NORMALIZED:
        torch.testing.assert_close(sums[taken], torch.ones(int(taken.sum())), atol=1e-5, rtol=0)
    else:
        assert torch.all(sums[taken] > 0)
    assert torch.all(sums[~taken] == 0)


@pytest.mark.parametrize("scale", [1.0, 20.0])
@pytest.mark.parametrize("steps", [3, "L"])
@pytest.mark.parametrize("update", ["full", "single"])
@pytest.mark.parametrize("attention", CONSTRAINED)
def test_constrained_evenness(attention, update, steps, scale):
    """csoftmax and csparsemax take the remaining fertilities ``1 - beta`` as upper bounds:
    every step respects them, so no word gets more than one unit of attention in all."""
    batch, _ = make_batch(LENGTHS, extra=1, seed=3)
    model = make_tagger(attention=attention, update=update, steps=steps, seed=4)
    with torch.no_grad():
        model.decoder.v.weight.mul_(scale)  # sharper scores: the bounds become active
        out = model(**batch)
    beta = out.attention.cumsum(1)
    before = torch.cat([torch.zeros_like(beta[:, :1]), beta[:, :-1]], dim=1)  # beta^{n-1}
    assert torch.all(out.attention <= (1 - before).clamp_min(0) + 1e-5)
    assert float(beta.max()) <= 1 + 1e-5
    taken = torch.tensor([n if steps == "L" else min(steps, n) for n in LENGTHS])
    torch.testing.assert_close(beta[:, -1].sum(-1), taken.to(beta.dtype), atol=1e-4, rtol=0)
    if steps == "L":  # every word is covered exactly once
        torch.testing.assert_close(beta[:, -1], out.mask.to(beta.dtype), atol=1e-4, rtol=0)


def test_csparsemax_bounds_bind_and_give_sparse_steps():
    """With sharp scores csparsemax puts whole units on words and leaves exact zeros; a word
    it has covered gets nothing more."""
    batch, _ = make_batch(LENGTHS, extra=1, seed=3)
    model = make_tagger(attention="csparsemax", steps="L", seed=4)
    with torch.no_grad():
        model.decoder.v.weight.mul_(20.0)
        out = model(**batch)
    att, beta = out.attention, out.attention.cumsum(1)
    assert int((att[out.mask[:, None, :].expand_as(att)] == 0).sum()) > 0
    covered = torch.cat([torch.zeros_like(beta[:, :1]), beta[:, :-1]], dim=1) >= 1 - 1e-6
    assert covered.any() and torch.all(att[covered] <= 1e-5)


def test_single_update_with_weights_not_summing_to_one_is_eq_4():
    """NEF-S (Eq. 4) with sigmoid: ``s_i = alpha_i tanh(W_s cbar + b_s)``, ``cbar = sum_i
    alpha_i c_i`` with the windows ``c_i`` built by hand (first step: the sketches are 0)."""
    batch, _ = make_batch([5, 3], extra=1, seed=2)
    model = make_tagger(attention="sigmoid", update="single", steps=1, window=1, seed=6)
    decoder = model.decoder
    with torch.no_grad():
        decoder.state_map.bias.normal_()  # a bias b_s that matters
        out = model(**batch)
        states, mask = model.encoder(**batch)
    alpha = out.attention[:, 0]  # [B, T]
    assert torch.all((alpha.sum(-1) - 1).abs() > 1e-3)  # not a distribution
    padded = F.pad(states.transpose(1, 2), (1, 1))  # [B, D_h, T + 2], zeros outside
    windows = padded.unfold(2, 3, 1)  # [B, D_h, T, 3]: c_i
    cbar = torch.einsum("bt,bdtk->bdk", alpha, windows)  # [B, D_h, 3]
    weight = decoder.state_map.weight[decoder.preattention_dim:]  # W_s [D_s, D_h, 3]
    bias = decoder.state_map.bias[decoder.preattention_dim:]
    pooled = torch.tanh(torch.einsum("sdk,bdk->bs", weight, cbar) + bias)  # [B, D_s]
    expected = alpha[..., None] * pooled[:, None, :]  # [B, T, D_s]
    torch.testing.assert_close(out.sketches, expected, atol=1e-6, rtol=1e-5)


def test_fixed_orders():
    batch, _ = make_batch(LENGTHS, extra=1)
    eye = torch.eye(8)
    for name in ("left_to_right", "right_to_left"):
        out = make_tagger(attention=name, steps="L")(**batch)
        for b, n in enumerate(LENGTHS):
            order = range(n) if name == "left_to_right" else range(n - 1, -1, -1)
            expected = torch.stack([eye[i] for i in order])
            assert torch.equal(out.attention[b, :n], expected)
    out = make_tagger(attention="uniform", steps=2)(**batch)
    assert torch.allclose(out.attention[0, 1, :5], torch.full((5,), 0.2))


def test_vanilla_covers_every_word_once():
    batch, _ = make_batch(LENGTHS, extra=1)
    for criterion in ("score", "probability"):
        out = make_tagger(attention="vanilla", steps="L", vanilla_criterion=criterion)(**batch)
        att = out.attention
        assert set(att.unique().tolist()) <= {0.0, 1.0}
        assert torch.equal(att.sum(1), out.mask.float())  # each word exactly once
        taken = torch.arange(att.shape[1])[None, :] < out.steps[:, None]
        assert torch.equal(att.sum(-1), taken.float())  # one word per step


def test_vanilla_picks_the_best_scored_word_first():
    batch, _ = make_batch([6], seed=5)
    model = make_tagger(attention="vanilla", steps=1)
    out = model(**batch)
    states, _ = model.encoder(**{k: batch[k] for k in ("words", "lengths", "prefixes",
                                                      "suffixes")})
    decoder = model.decoder
    pre_s = decoder.state_map(states.transpose(1, 2)).transpose(1, 2)  # sketches are 0
    scores = model._scores(model._features(states, torch.tanh(pre_s)))
    assert int(out.attention[0, 0].argmax()) == int(scores[0].max(-1).values.argmax())


def test_steps_zero_is_a_bilstm_tagger():
    batch, _ = make_batch(LENGTHS, extra=1)
    model = make_tagger(steps=0)
    assert model.decoder is None and model.output.in_features == 10
    out = model(**batch)
    states, mask = model.encoder(**batch)
    expected = model.output(states)
    expected[..., 0] = very_negative(expected.dtype)  # the padding tag is never predicted
    torch.testing.assert_close(out.scores, expected)
    assert out.attention.shape == (4, 0, 8) and out.sketches is None
    with pytest.raises(ValueError, match="concat"):
        make_tagger(steps=0, concat=False)


def test_no_concat_features():
    model = make_tagger(steps=2, concat=False)
    assert model.output.in_features == SMALL["sketch_dim"]
    batch, _ = make_batch(LENGTHS)
    assert model(**batch).scores.shape == (4, 7, TAGS)


def test_qe_encoder_with_aligned_source_words():
    batch, _ = make_batch(LENGTHS, extra=1, aligned=True)
    del batch["prefixes"], batch["suffixes"]
    torch.manual_seed(0)
    model = EasyFirstTagger(VOCAB, TAGS, 0, SOURCE,
                            **grouped(**SMALL, use_affixes=False, steps=5, dropout=0.0)).eval()
    assert model.encoder.input_dim == SMALL["word_dim"] + SMALL["source_dim"]
    out = model(**batch)
    for b, n in enumerate(LENGTHS):
        alone = model(**select(batch, b))
        torch.testing.assert_close(out.scores[b, :n], alone.scores[0], atol=1e-5, rtol=1e-5)
    # the source part is the mean of the aligned words' embeddings (0 if none)
    enc = model.encoder
    aligned = torch.tensor([[[3, 5, 0], [0, 0, 0]]])
    x = enc.embed(torch.tensor([[2, 4]]), aligned=aligned)[..., SMALL["word_dim"]:]
    table = enc.source_embedding.weight
    torch.testing.assert_close(x[0, 0], (table[3] + table[5]) / 2)
    assert torch.all(x[0, 1] == 0)


def test_encoder_dimensions_follow_the_paper():
    enc = TaggingEncoder(100, 50)
    assert enc.input_dim == 64 + 50 + 50 == 164 and enc.output_dim == 100
    enc = TaggingEncoder(100, 0, 80, TaggingEncoderOptions(use_affixes=False))
    assert enc.input_dim == 128


def test_embedding_tables_start_at_dynet_scale():
    """Uniform in +-sqrt(3 / dim) (DyNet's lookup default), padding rows 0."""
    enc = TaggingEncoder(2000, 3000, 500,
                         TaggingEncoderOptions(word_dim=64, affix_dim=48, source_dim=12))
    for table in (enc.word_embedding, enc.prefix_embedding, enc.suffix_embedding,
                  enc.source_embedding):
        bound = math.sqrt(3 / table.embedding_dim)
        weight = table.weight[1:]
        assert weight.abs().max() <= bound and weight.abs().max() > 0.95 * bound
        assert abs(float(weight.std()) - bound / math.sqrt(3)) < 0.05 * bound
        assert torch.equal(table.weight[0], torch.zeros(table.embedding_dim))


def test_capitalization_one_hot_input():
    enc = TaggingEncoder(10, 0, 0, TaggingEncoderOptions(use_affixes=False,
                                                         use_capitalization=True, word_dim=3))
    assert enc.input_dim == 3 + 4
    words, caps = torch.tensor([[2, 3, 0]]), torch.tensor([[1, 4, 0]])
    inputs = enc.embed(words, caps=caps)
    assert inputs[0, :, 3:].tolist() == [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="needs caps"):
        enc.embed(words)
    tagger = EasyFirstTagger(10, 5, **grouped(use_affixes=False, use_capitalization=True,
                                              steps=2))
    out = tagger(words, torch.tensor([2]), caps=caps)
    assert out.scores.shape[:2] == (1, 3)


@pytest.mark.parametrize("crf", [False, True])
def test_loss_ignores_padding_and_predict(crf):
    batch, tags = make_batch(LENGTHS, extra=2)
    model = make_tagger(steps=3, crf=crf)
    weights = torch.tensor([1.0, 1, 5, 1, 1, 1])
    if crf:
        with torch.no_grad():
            model.transition.normal_()
            model.start.normal_()
            model.end.normal_()
    out = model(**batch)
    per_sentence = model.loss(out, tags, batch["lengths"], reduction="none", tag_weights=weights)
    noisy = tags.masked_fill(~out.mask, 3)
    torch.testing.assert_close(
        model.loss(out, noisy, batch["lengths"], reduction="none", tag_weights=weights),
        per_sentence)
    for b, n in enumerate(LENGTHS):
        alone = model(**select(batch, b))
        loss = model.loss(alone, tags[b:b + 1, :n], reduction="none", tag_weights=weights)
        torch.testing.assert_close(loss[0], per_sentence[b], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(model.loss(out, tags, batch["lengths"], tag_weights=weights),
                               per_sentence.mean())
    pred = model.predict(out, batch["lengths"])
    assert pred.shape == tags.shape
    assert torch.all(pred[~out.mask] == 0) and torch.all(pred[out.mask] > 0)
    if not crf:
        # weighted cross-entropy by hand
        logp = out.scores.log_softmax(-1).gather(-1, tags[..., None])[..., 0]
        manual = -(logp * weights[tags] * out.mask).sum(-1)
        torch.testing.assert_close(per_sentence, manual)


def test_crf_loss_against_enumeration():
    """CRF loss without weights: -log p(gold) with start/end scores, by brute force."""
    import itertools

    batch, tags = make_batch([3], seed=7)
    model = make_tagger(steps=2, crf=True, pad_tag=None)
    with torch.no_grad():
        model.transition.normal_()
        model.start.normal_()
        model.end.normal_()
    out = model(**batch)
    e, tr, st, en = out.scores[0].double(), model.transition.double(), model.start, model.end

    def score(y):
        s = st[y[0]] + en[y[-1]] + sum(e[i, y[i]] for i in range(3))
        return s + sum(tr[y[i], y[i + 1]] for i in range(2))

    log_z = torch.logsumexp(torch.stack([score(y) for y in itertools.product(range(TAGS),
                                                                              repeat=3)]), 0)
    expected = log_z - score(tags[0].tolist())
    torch.testing.assert_close(model.loss(out, tags).double(), expected, atol=1e-4, rtol=1e-5)
    best = max(itertools.product(range(TAGS), repeat=3), key=lambda y: float(score(y).detach()))
    assert model.predict(out).tolist() == [list(best)]


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_gradients_are_finite(attention):
    batch, tags = make_batch(LENGTHS, extra=1)
    model = make_tagger(attention=attention, steps="L", crf=True).train()
    loss = model.loss(model(**batch), tags, batch["lengths"])
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
    if attention not in registry.POSITIONAL:  # the scores of the words are learned
        assert model.decoder.v.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(("attention", "crf"), [
    ("csoftmax", False), ("csoftmax", True), ("csparsemax", False), ("csparsemax", True),
    ("sigmoid", False), ("sigmoid", True),
])
def test_adagrad_reduces_the_loss(attention, crf):
    batch, tags = make_batch([6, 4, 5], seed=11)
    model = make_tagger(attention=attention, update="full", steps="L", crf=crf).train()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    losses = []
    for _ in range(25):
        optimizer.zero_grad()
        loss = model.loss(model(**batch), tags, batch["lengths"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.3 * losses[0], losses


def test_invalid_arguments():
    with pytest.raises(ValueError, match="unknown easy_first attention 'hardmax'; valid: "
                       "centmax15, csoftmax, csparsemax, entmax, entmax15, sigmoid"):
        make_tagger(attention="hardmax")
    with pytest.raises(ValueError, match="unknown update"):
        make_tagger(update="both")
    with pytest.raises(ValueError, match="steps"):
        make_tagger(steps=-1)
    with pytest.raises(ValueError, match="steps"):
        make_tagger(steps="N")
    batch, tags = make_batch([3])
    with pytest.raises(ValueError, match=r"tag_weights must have shape \[6\]"):
        make_tagger().loss(make_tagger()(**batch), tags, tag_weights=torch.tensor([1.0, 5]))


# ---------------------------------------------------------------------- the task around it

NAMES = ["<pad>", "B-PER", "I-PER", "O", "VERB", "NOUN"]  # as many as TAGS


def test_task_weighs_the_loss_by_tag_name():
    from lit_structattn.tasks import TaggingTask

    batch, tags = make_batch(LENGTHS)
    task = TaggingTask(make_tagger(steps=2, crf=True), NAMES, tag_weights={"I-PER": 5.0})
    assert task.loss_weights.tolist() == [1, 1, 5, 1, 1, 1]
    assert "loss_weights" not in task.state_dict()  # rebuilt from the hyper-parameters
    full = dict(batch, tags=tags, caps=torch.ones_like(tags))  # a tagging DataModule's batch
    outputs = task(full)
    expected = task.model.loss(outputs, tags, batch["lengths"],
                               tag_weights=torch.tensor([1.0, 1, 5, 1, 1, 1]))
    torch.testing.assert_close(task.loss(full), expected)
    assert TaggingTask(make_tagger(), NAMES).loss_weights is None
    assert "first_step_on_verb" in task.metrics["test"]  # a VERB tag and sketch steps


@pytest.mark.parametrize(("names", "weights", "problem"), [
    (NAMES[:-1], None, "5 tag_names for a model with num_tags=6"),
    (NAMES, {"B-LOC": 2.0}, r"tag_weights names unknown tags \['B-LOC'\]"),
    (NAMES, {"O": 0.0}, "tag_weights must be positive"),
])
def test_task_refuses_tags_that_do_not_fit(names, weights, problem):
    from lit_structattn.tasks import TaggingTask

    with pytest.raises(ValueError, match=problem):
        TaggingTask(make_tagger(), names, tag_weights=weights)
