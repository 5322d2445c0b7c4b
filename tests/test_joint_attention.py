"""Joint attention output layers (Shankar et al. 2018) in the encoder-decoder: full-joint and
beam-joint against a brute-force mixture, normalization, a learnable task, decoding with a
different K (an argument: the model keeps its trained K), checkpoints saved before the output
layer was a submodule, and bad settings."""

from __future__ import annotations

import math

import pytest
import torch

from lit_structattn.common.masks import lengths_to_mask
from lit_structattn.models.seq2seq import EncodedSource, Seq2Seq, SourceEncoderOptions

from .seq2seq_training import copy_task, train


def mixture(model, queries, weights, source, keep=None):
    """log sum_a P(a) P(y | x_a) by a loop over the kept positions (renormalized)."""
    batch, steps, length = weights.shape
    layer = model.output_layer
    out = torch.empty(batch, steps, layer.generator.out_features, dtype=torch.float64)
    for b in range(batch):
        for t in range(steps):
            positions = range(length) if keep is None else weights[b, t].topk(keep).indices
            total = sum(float(weights[b, t, a]) for a in positions)
            p = 0
            for a in positions:
                h = torch.tanh(layer.combine(torch.cat([source.memory[b, a], queries[b, t]])))
                p = p + weights[b, t, a] / total * layer.generator(h).softmax(-1)
            out[b, t] = p.double().log()
    return out


def setup(output, joint_k=6, seed=0):
    torch.manual_seed(seed)
    model = Seq2Seq(9, 9, embed_dim=5, hidden_dim=5, attention="softmax", output=output,
                    joint_k=joint_k, input_feed=True).eval()
    lengths = torch.tensor([4, 2])
    mask = lengths_to_mask(lengths, 4)
    memory = torch.randn(2, 4, 5)
    source = EncodedSource(memory, mask, memory_share=model.output_layer.memory_share(memory))
    weights = torch.rand(2, 3, 4).masked_fill(~mask[:, None], 0)
    weights = weights / weights.sum(-1, keepdim=True)
    return model, source, torch.randn(2, 3, 5), torch.randn(2, 3, 5), weights


@pytest.mark.parametrize(("output", "k", "keep"), [
    ("full_joint", 6, None), ("beam_joint", 6, None), ("beam_joint", 4, None),
    ("beam_joint", 2, 2), ("beam_joint", 1, 1),
])
def test_joint_scores_are_the_attention_weighted_mixture(output, k, keep):
    model, source, combined, queries, weights = setup(output, k)
    with torch.no_grad():
        scores = model.output_layer(combined, queries, weights, source.memory_share)
        expected = mixture(model, queries, weights, source, keep)
    torch.testing.assert_close(scores.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scores.logsumexp(-1), torch.zeros(2, 3), atol=1e-5, rtol=0)


@pytest.mark.parametrize("output", ["full_joint", "beam_joint"])
def test_joint_scores_read_the_memory_rows_they_are_given(output):
    """``rows`` maps each output row to its sentence's memory (the loss's token rows)."""
    model, source, combined, queries, weights = setup(output, 2)
    rows = torch.tensor([1, 0])
    with torch.no_grad():
        scores = model.output_layer(combined, queries, weights, source.memory_share, rows)
        expected = model.output_layer(combined, queries, weights, source.memory_share[rows])
        unmapped = model.output_layer(combined, queries, weights, source.memory_share)
    torch.testing.assert_close(scores, expected)
    assert not torch.allclose(scores, unmapped)


def test_beam_joint_learns_and_decodes_with_another_k():
    """A copy task: the beam-joint loss falls; decoding with K = 1 and K = 6 both run, and with
    K = 1 the next-token distribution is the hard-attention one."""
    torch.manual_seed(1)
    model = Seq2Seq(12, 12, embed_dim=16, hidden_dim=16, output="beam_joint", joint_k=3,
                    input_feed=True, encoder=SourceEncoderOptions(kind="bilstm", hidden_dim=8))
    src, lengths, tgt_in, tgt_out = copy_task(model)
    losses = train(model, src, lengths, tgt_in, tgt_out, steps=80)
    assert losses[-1] < 0.3 * losses[0]
    model.eval()
    for k in (1, 6):
        tokens = model.beam_search(src, lengths, max_len=8, beam=3, joint_k=k)
        assert tokens.shape[0] == 16
    scores, weights, source = model(src[:2], lengths[:2], tgt_in[:2, :1], joint_k=1)
    state = model.initial_state(source)
    combined, state, step_weights = model._step(model.tgt_embed(tgt_in[:2, 0]), state, source)
    top = step_weights.argmax(-1)
    layer = model.output_layer
    hard = torch.tanh(layer.combine(torch.cat([source.memory[torch.arange(2), top],
                                               state.h[-1]], -1)))
    torch.testing.assert_close(scores[:, 0], layer.generator(hard).log_softmax(-1))


BILSTM_4 = SourceEncoderOptions(kind="bilstm", hidden_dim=4)


def decoding_setup(output="beam_joint", joint_k=3, **options):
    """An untrained model (weights drawn wide enough for the K to matter) and 4 sources."""
    torch.manual_seed(5)
    model = Seq2Seq(15, 15, embed_dim=8, hidden_dim=8, output=output, joint_k=joint_k,
                    input_feed=True, encoder=BILSTM_4, init_range=0.5,
                    **options).eval()
    lengths = torch.tensor([7, 5, 3, 6])
    src = torch.randint(3, 15, (4, 7)) * lengths_to_mask(lengths, 7)
    return model, src, lengths, torch.randint(3, 15, (4, 5))


def decodings(model, src, lengths, tgt_in, **options):
    """Everything a decoding option reaches: greedy tokens and attention, the final beams, the
    best beam and the teacher-forced scores."""
    with torch.no_grad():
        greedy, attention = model.greedy(src, lengths, 9, **options)
        final = model.beams(src, lengths, 9, beam=3, **options)
        best = model.beam_search(src, lengths, 9, beam=3, **options)
        scores = model(src, lengths, tgt_in, **options)[0]
    return greedy, attention, final.tokens, final.log_prob, final.coverage, best, scores


def assert_same(found, expected):
    for got, want in zip(found, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(("output", "k"), [
    ("beam_joint", 1), ("beam_joint", 2), ("beam_joint", 6), ("sample_joint", 1),
    ("hard", 4), ("full_joint", 2), ("soft", 2),
])
def test_decoding_with_k_equals_the_model_trained_with_that_k(output, k):
    """``joint_k=k`` decodes as a model built with ``joint_k=k`` and the same weights (what
    overwriting the model's K did before it was an argument)."""
    model, src, lengths, tgt_in = decoding_setup(output)
    reference = Seq2Seq(15, 15, embed_dim=8, hidden_dim=8, output=output, joint_k=k,
                        input_feed=True, encoder=BILSTM_4).eval()
    reference.load_state_dict(model.state_dict())
    assert_same(decodings(model, src, lengths, tgt_in, joint_k=k),
                decodings(reference, src, lengths, tgt_in))


def test_decoding_with_another_k_leaves_the_model_as_trained():
    """Decoding with K = 1 changes neither the model's K nor its weights: a later call
    without the argument gives the trained K's results, which K = 1's are not."""
    model, src, lengths, tgt_in = decoding_setup()
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    trained = decodings(model, src, lengths, tgt_in)
    other = decodings(model, src, lengths, tgt_in, joint_k=1)
    assert model.joint_k == model.output_layer.k == 3
    assert_same(decodings(model, src, lengths, tgt_in), trained)
    assert_same(decodings(model, src, lengths, tgt_in, joint_k=3), trained)
    assert not torch.allclose(other[-1], trained[-1])  # the scores: K = 1 is another output
    assert not torch.allclose(other[3], trained[3])  # and gives other beams
    assert all(torch.equal(value, weights[name]) for name, value in model.state_dict().items())
    with pytest.raises(ValueError, match="joint_k must be >= 1, got 0"):
        model.greedy(src, lengths, 9, joint_k=0)


@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_checkpoints_from_before_the_output_layer_module_load(tie_embeddings):
    """A state dict saved when ``combine`` and ``generator`` were the model's own layers (keys
    ``combine.weight``, ``generator.weight``, ``generator.bias``) loads into ``output_layer``,
    also nested in a task, and gives the same outputs (tied embeddings stay tied)."""
    model, src, lengths, tgt_in = decoding_setup(tie_embeddings=tie_embeddings)
    old = {name.removeprefix("output_layer."): value for name, value in model.state_dict().items()}
    assert {"combine.weight", "generator.weight", "generator.bias"} <= set(old)
    fresh = Seq2Seq(15, 15, embed_dim=8, hidden_dim=8, output="beam_joint", joint_k=3,
                    input_feed=True, encoder=BILSTM_4,
                    tie_embeddings=tie_embeddings).eval()
    nested = torch.nn.ModuleDict({"model": fresh})
    nested.load_state_dict({f"model.{name}": value for name, value in old.items()})
    assert_same(decodings(fresh, src, lengths, tgt_in), decodings(model, src, lengths, tgt_in))
    assert (fresh.output_layer.generator.weight is fresh.tgt_embed.weight) == tie_embeddings


def test_bad_output_settings():
    with pytest.raises(ValueError, match="valid: soft, full_joint, beam_joint"):
        Seq2Seq(9, 9, output="hard_joint")
    with pytest.raises(ValueError, match="joint_k must be >= 1"):
        Seq2Seq(9, 9, output="beam_joint", joint_k=0)
    with pytest.raises(ValueError, match="needs an attention whose weights are a distribution"):
        Seq2Seq(9, 9, attention="segmentation", output="full_joint")


def test_k1_decoding_of_a_joint_model_is_the_top_positions_own_softmax_by_hand():
    """Shankar et al. (2018), Table 2: models trained with K = 6 "deployed for test-time greedy
    decoding with K set to 1 ... the output now has only a single softmax component". A hand-built
    output layer (one memory unit, one hidden unit, three words): position 0 is the most attended
    (0.4) and prefers word 0; positions 1 and 2 (0.35, 0.25) prefer word 1. The mixture over all
    positions prefers word 1; with K = 1 the scores are log P(y | x_0) alone, computed here from
    the formula, and greedy decoding picks word 0. The module keeps its trained K = 6."""
    from lit_structattn.models.seq2seq.joint import JointOutput

    layer = JointOutput("beam_joint", memory_dim=1, hidden_dim=1, vocab=3, k=6)
    with torch.no_grad():
        layer.combine.weight.copy_(torch.tensor([[1.0, 0.0]]))  # h~ = tanh(m_a)
        layer.generator.weight.copy_(torch.tensor([[2.0], [-2.0], [0.0]]))
        layer.generator.bias.zero_()
    memory = torch.tensor([[[1.0], [-1.0], [-1.0]]])  # [B=1, S=3, M=1]
    weights = torch.tensor([[[0.4, 0.35, 0.25]]])  # [B, T=1, S]
    queries = torch.zeros(1, 1, 1)
    combined = layer.attentional((weights @ memory), queries)
    with torch.no_grad():
        k1 = layer(combined, queries, weights, layer.memory_share(memory), k=1)[0, 0]
        k6 = layer(combined, queries, weights, layer.memory_share(memory))[0, 0]
    logits = [2 * math.tanh(1.0), -2 * math.tanh(1.0), 0.0]  # V tanh(U [m_0; h])
    norm = math.log(sum(math.exp(v) for v in logits))
    assert k1.tolist() == pytest.approx([v - norm for v in logits], abs=1e-6)
    assert int(k1.argmax()) == 0 and int(k6.log_softmax(-1).argmax()) == 1
    assert layer.k == 6


def test_k1_greedy_decoding_feeds_the_soft_state_and_scores_the_top_position():
    """Greedy decoding of a K = 6 beam-joint model with ``joint_k=1``, step by step by hand: the
    decoder state (input feeding included) is the soft-attention one, as in the authors' code
    (only the output distribution changes), and each token is the argmax of P(y | x_a*) for the
    most attended position a* (the output layer's own formula, U and V applied by hand)."""
    model, src, lengths, _ = decoding_setup("beam_joint", joint_k=6)
    with torch.no_grad():
        tokens, _ = model.greedy(src, lengths, 6, joint_k=1)
        source = model.encode(src, lengths)
        state = model.initial_state(source)
        previous = src.new_full((len(src),), model.bos_id)
        layer = model.output_layer
        for step in range(tokens.shape[1]):
            _, state, weights = model._step(model.tgt_embed(previous), state, source)
            top = weights.argmax(-1)  # a* [B]
            memory = source.memory[torch.arange(len(src)), top]  # m_a* [B, M]
            hidden = torch.tanh(layer.combine(torch.cat([memory, state.h[-1]], dim=-1)))
            previous = layer.generator(hidden).argmax(-1)
            decoding = tokens[:, step] != 0  # finished rows are padded with 0
            assert torch.equal(previous[decoding], tokens[decoding, step])
