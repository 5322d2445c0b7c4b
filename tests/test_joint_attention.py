"""Joint attention output layers (Shankar et al. 2018) in the encoder-decoder: full-joint and
beam-joint against a brute-force mixture, normalization, a learnable task, decoding with a
different K, and bad settings."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.common.masks import lengths_to_mask
from lit_structattn.models.seq2seq import EncodedSource, Seq2Seq, SourceEncoderOptions

from .seq2seq_training import copy_task, train


def mixture(model, queries, weights, source, keep=None):
    """log sum_a P(a) P(y | x_a) by a loop over the kept positions (renormalized)."""
    batch, steps, length = weights.shape
    out = torch.empty(batch, steps, model.generator.out_features, dtype=torch.float64)
    for b in range(batch):
        for t in range(steps):
            positions = range(length) if keep is None else weights[b, t].topk(keep).indices
            total = sum(float(weights[b, t, a]) for a in positions)
            p = 0
            for a in positions:
                h = torch.tanh(model.combine(torch.cat([source.memory[b, a], queries[b, t]])))
                p = p + weights[b, t, a] / total * model.generator(h).softmax(-1)
            out[b, t] = p.double().log()
    return out


def setup(output, joint_k=6, seed=0):
    torch.manual_seed(seed)
    model = Seq2Seq(9, 9, embed_dim=5, hidden_dim=5, attention="softmax", output=output,
                    joint_k=joint_k, input_feed=True).eval()
    lengths = torch.tensor([4, 2])
    mask = lengths_to_mask(lengths, 4)
    memory = torch.randn(2, 4, 5)
    source = EncodedSource(memory, mask, memory_share=model.memory_share(memory))
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
        scores = model._predict(combined, queries, weights, source.memory_share)
        expected = mixture(model, queries, weights, source, keep)
    torch.testing.assert_close(scores.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scores.logsumexp(-1), torch.zeros(2, 3), atol=1e-5, rtol=0)


@pytest.mark.parametrize("output", ["full_joint", "beam_joint"])
def test_joint_scores_read_the_memory_rows_they_are_given(output):
    """``rows`` maps each output row to its sentence's memory (the loss's token rows)."""
    model, source, combined, queries, weights = setup(output, 2)
    rows = torch.tensor([1, 0])
    with torch.no_grad():
        scores = model._predict(combined, queries, weights, source.memory_share, rows)
        expected = model._predict(combined, queries, weights, source.memory_share[rows])
        unmapped = model._predict(combined, queries, weights, source.memory_share)
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
        model.joint_k = k
        tokens = model.beam_search(src, lengths, max_len=8, beam=3)
        assert tokens.shape[0] == 16
    model.joint_k = 1
    scores, weights, source = model(src[:2], lengths[:2], tgt_in[:2, :1])
    state = model.initial_state(source)
    combined, state, step_weights = model._step(model.tgt_embed(tgt_in[:2, 0]), state, source)
    top = step_weights.argmax(-1)
    hard = torch.tanh(model.combine(torch.cat([source.memory[torch.arange(2), top],
                                               state.h[-1]], -1)))
    torch.testing.assert_close(scores[:, 0], model.generator(hard).log_softmax(-1))


def test_bad_output_settings():
    with pytest.raises(ValueError, match="valid: soft, full_joint, beam_joint"):
        Seq2Seq(9, 9, output="hard_joint")
    with pytest.raises(ValueError, match="joint_k must be >= 1"):
        Seq2Seq(9, 9, output="beam_joint", joint_k=0)
    with pytest.raises(ValueError, match="needs an attention whose weights are a distribution"):
        Seq2Seq(9, 9, attention="segmentation", output="full_joint")
