"""The encoder-decoder with constrained attention (Malaviya et al. 2018): fertility bounds on the
cumulative attention, the <SINK> token, the exhaustion bonus, decoding and training."""

from __future__ import annotations

import math

import pytest
import torch

from lit_structattn.common.masks import lengths_to_mask
from lit_structattn.layers.attention import Attention
from lit_structattn.models.seq2seq import Seq2Seq, SourceEncoderOptions, rescore

from .seq2seq_training import train


def make_batch(seed=0, batch=4, length=7):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([length, length - 2, 3, length - 1])[:batch]
    src = torch.randint(3, 20, (batch, length), generator=generator)
    src = src.masked_fill(torch.arange(length)[None] >= lengths[:, None], 0)
    return src, lengths


def check_bounds(attention, src_lengths, fertility):
    """Rows sum to 1, padding gets 0, and the cumulative attention of every real token but the
    sink (the last one) stays within its fertility."""
    length = attention.shape[-1]
    real = torch.arange(length)[None] < src_lengths[:, None]
    sink = torch.arange(length)[None] == (src_lengths - 1)[:, None]
    torch.testing.assert_close(attention.sum(-1), torch.ones(attention.shape[:2]))
    assert (attention.masked_select(~real[:, None].expand_as(attention)) == 0).all()
    total = attention.sum(1)  # [B, S]
    assert (total[real & ~sink] <= fertility[real & ~sink] + 1e-5).all()
    return total


@pytest.mark.parametrize("transform", ["csoftmax", "csparsemax"])
@pytest.mark.parametrize("bonus", [0.0, 0.2])
def test_cumulative_attention_stays_within_the_fertilities(transform, bonus):
    torch.manual_seed(0)
    model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, attention=transform, sink=True,
                    fertility=1.0, exhaustion_bonus=bonus, input_feed=True).eval()
    src, lengths = make_batch()
    tgt_in = torch.randint(3, 20, (4, 12))
    _, attention, source = model(src, lengths, tgt_in)
    total = check_bounds(attention, lengths, source.fertility)
    assert (total[torch.arange(4), lengths - 1] > 1).any()  # the sink takes what is left
    tokens, attention = model.greedy(src, lengths, max_len=12)
    check_bounds(attention, lengths, source.fertility)
    assert model.beam_search(src, lengths, max_len=12, beam=3).shape[0] == 4


def test_per_token_fertilities_and_exact_zeros():
    torch.manual_seed(1)
    model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, attention="csparsemax", sink=True).eval()
    src, lengths = make_batch(seed=1)
    fertility = torch.full(src.shape, 0.5)
    _, attention, source = model(src, lengths, torch.randint(3, 20, (4, 9)), fertility=fertility)
    check_bounds(attention, lengths, source.fertility)
    assert (source.fertility[torch.arange(4), lengths - 1] > 100).all()  # the sink is unbounded


def test_exhaustion_bonus_is_added_to_the_scores_before_the_transform():
    torch.manual_seed(2)
    layer = Attention(4, transform="csparsemax")
    query, keys = torch.randn(2, 4), torch.randn(2, 5, 4)
    upper, bonus = torch.ones(2, 5), torch.randn(2, 5)
    _, weights = layer(query, keys, upper=upper, bonus=bonus)
    expected = layer.transform(layer.scores(query[:, None], keys)[:, 0] + bonus, upper=upper)
    torch.testing.assert_close(weights, expected)


def test_constrained_attention_needs_the_sink_and_a_positive_fertility():
    with pytest.raises(ValueError, match="needs sink=True"):
        Seq2Seq(20, 20, attention="csoftmax")
    with pytest.raises(ValueError, match="fertility must be > 0"):
        Seq2Seq(20, 20, attention="csoftmax", sink=True, fertility=0.0)


def test_constrained_model_learns_to_copy():
    """Copying a 4-token source (plus the sink): the loss falls with csparsemax attention."""
    torch.manual_seed(3)
    model = Seq2Seq(12, 12, embed_dim=16, hidden_dim=16, attention="csparsemax", sink=True,
                    fertility=1.0, exhaustion_bonus=0.2, input_feed=True)
    words = torch.randint(3, 11, (16, 4))
    src = torch.cat([words, torch.full((16, 1), 11)], 1)  # 11 = <sink>
    lengths = torch.full((16,), 5)
    tgt_in = torch.cat([torch.ones(16, 1, dtype=torch.long), words], 1)
    tgt_out = torch.cat([words, torch.full((16, 1), 2)], 1)
    losses = train(model, src, lengths, tgt_in, tgt_out, steps=60)
    assert losses[-1] < 0.5 * losses[0]


def test_coverage_vector_adds_h_v_beta_to_the_scores():
    """COVVECTOR with v = 0 is the plain model; with v != 0 the attention changes and v learns."""
    src, lengths = make_batch(seed=4)
    tgt_in = torch.randint(3, 20, (4, 6))
    outputs = {}
    for name, flag in (("plain", False), ("covvector", True)):
        torch.manual_seed(5)
        model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, attention="sparsemax",
                        input_feed=True, coverage_vector=flag)
        outputs[name] = (model, model(src, lengths, tgt_in))
    model, (logits, attention, _) = outputs["covvector"]
    torch.testing.assert_close(logits, outputs["plain"][1][0])
    with torch.no_grad():
        model.coverage_weight.fill_(-3.0)
    logits, attention, _ = model(src, lengths, tgt_in)
    assert not torch.allclose(attention, outputs["plain"][1][1])
    logits.sum().backward()
    assert model.coverage_weight.grad.abs().sum() > 0
    assert model.beam_search(src, lengths, max_len=5, beam=2).shape[0] == 4
    with pytest.raises(ValueError, match="coverage_vector needs an attention that takes a score"):
        Seq2Seq(20, 20, attention="segmentation", coverage_vector=True)


def test_rescore_length_and_coverage_penalties():
    log_prob, length = torch.tensor([-4.0, -4.0]), torch.tensor([3.0, 7.0])
    coverage = torch.tensor([[1.5, 0.5, 0.0], [1.0, 1.0, 1.0]])
    torch.testing.assert_close(rescore(log_prob, length, coverage), log_prob / length)
    wu = rescore(log_prob, length, coverage, alpha=0.6, length_penalty="wu")
    torch.testing.assert_close(wu, log_prob / ((5 + length) / 6) ** 0.6)
    cp = rescore(log_prob, length, coverage, beta=0.5) - log_prob / length
    # min(1.5, 1) -> log 1 = 0; log 0.5; the zero is floored at 0.1; full coverage costs 0
    torch.testing.assert_close(cp, torch.tensor([0.5 * (math.log(0.5) + math.log(0.1)), 0.0]))
    with pytest.raises(ValueError, match="valid: avg, wu"):
        rescore(log_prob, length, coverage, length_penalty="gnmt")


def test_beam_search_with_covpenalty_runs_and_defaults_unchanged():
    torch.manual_seed(6)
    model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, attention="sparsemax").eval()
    src, lengths = make_batch(seed=6)
    plain = model.beam_search(src, lengths, max_len=8, beam=4)
    same = model.beam_search(src, lengths, max_len=8, beam=4, coverage_penalty=0.0)
    assert torch.equal(plain, same)
    penalized = model.beam_search(src, lengths, max_len=8, beam=4, length_penalty="wu",
                                  alpha=0.6, coverage_penalty=5.0)
    assert penalized.shape[0] == 4


BILSTM_4 = SourceEncoderOptions(kind="bilstm", hidden_dim=4)
BRIDGE = {"encoder": BILSTM_4, "decoder_init": "encoder"}


@pytest.mark.parametrize(("attention", "extra", "seed"), [("softmax", {}, 3), ("csparsemax", {}, 3),
                                                          ("softmax", BRIDGE, 9)])
def test_batched_decoding_equals_decoding_each_sentence_alone(attention, extra, seed):
    """Finished sentences leave the batch during greedy and beam search: the outputs must be
    those of decoding every sentence on its own (some end early, some run to the limit; the
    seed makes both happen)."""
    torch.manual_seed(seed)
    model = Seq2Seq(15, 15, embed_dim=8, hidden_dim=8, attention=attention,
                    sink=attention != "softmax", input_feed=True, **extra).eval()
    generator = model.output_layer.generator
    with torch.no_grad():
        generator.bias[model.eos_id] = 0.2  # <eos> depends strongly on the state:
        generator.weight[model.eos_id] *= 6  # some sentences end at once, some never
    lengths = torch.tensor([5, 3, 6, 2, 4, 6])
    src = torch.randint(3, 15, (6, 6)) * lengths_to_mask(lengths, 6)
    tokens, attention_maps = model.greedy(src, lengths, max_len=9)
    beams = model.beams(src, lengths, max_len=9, beam=3)
    ends = [(row == model.eos_id).nonzero() for row in tokens]
    assert any(len(e) and e[0] < 3 for e in ends) and any(not len(e) for e in ends)
    for b in range(6):
        one = (src[b : b + 1, : lengths[b]], lengths[b : b + 1])
        alone, alone_attention = model.greedy(*one, max_len=9)
        width = alone.shape[1]
        assert torch.equal(tokens[b, :width], alone[0]) and not tokens[b, width:].any()
        torch.testing.assert_close(attention_maps[b, :width, : lengths[b]], alone_attention[0])
        single = model.beams(*one, max_len=9, beam=3)
        steps = single.tokens.shape[2]
        assert torch.equal(beams.tokens[b, :, :steps], single.tokens[0])
        torch.testing.assert_close(beams.log_prob[b], single.log_prob[0])
        torch.testing.assert_close(beams.length[b], single.length[0])
        torch.testing.assert_close(beams.coverage[b, :, : lengths[b]], single.coverage[0])
        assert (beams.coverage[b, :, lengths[b] :] == 1).all()


def test_beam_search_scores_are_the_model_log_probabilities_and_beam_one_is_greedy():
    torch.manual_seed(4)
    model = Seq2Seq(12, 12, embed_dim=8, hidden_dim=8, input_feed=True).eval()
    lengths = torch.tensor([4, 2, 3])
    src = torch.randint(3, 12, (3, 4)) * lengths_to_mask(lengths, 4)
    greedy, _ = model.greedy(src, lengths, max_len=7)
    one = model.beams(src, lengths, max_len=7, beam=1)
    assert torch.equal(one.tokens[:, 0, : greedy.shape[1]], greedy)
    found = model.beams(src, lengths, max_len=7, beam=4)
    for k in range(4):  # teacher-force every final hypothesis and add up its log-probs
        tokens = found.tokens[:, k]
        steps = found.length[:, k].long()
        tgt_in = torch.cat([torch.full((3, 1), model.bos_id), tokens[:, :-1]], dim=1)
        with torch.no_grad():
            logits, _, _ = model(src, lengths, tgt_in)
        log_probs = logits.log_softmax(-1).gather(2, tokens[..., None])[..., 0]
        mask = torch.arange(tokens.shape[1])[None] < steps[:, None]
        torch.testing.assert_close((log_probs * mask).sum(1), found.log_prob[:, k])


def test_tied_embeddings_share_one_matrix():
    model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, tie_embeddings=True)
    generator = model.output_layer.generator
    assert generator.weight is model.tgt_embed.weight is model.encoder.embed.weight
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in Seq2Seq(20, 20, embed_dim=8, hidden_dim=8).parameters()) - 2 * 160
    separate_source = Seq2Seq(30, 20, embed_dim=8, hidden_dim=8, tie_embeddings=True)
    assert separate_source.encoder.embed.weight is not separate_source.tgt_embed.weight
    with pytest.raises(ValueError, match="embed_dim == hidden_dim"):
        Seq2Seq(20, 20, embed_dim=8, hidden_dim=16, tie_embeddings=True)


def test_init_range_bounds_every_parameter():
    kwargs = dict(embed_dim=8, hidden_dim=8, tie_embeddings=True, coverage_vector=True)
    bounded = Seq2Seq(20, 20, init_range=0.1, **kwargs)
    assert all(p.abs().max() <= 0.1 for p in bounded.parameters())
    assert all(p.abs().max() > 0.01 for p in bounded.parameters())  # drawn, not zeroed
    default = Seq2Seq(20, 20, **kwargs)  # PyTorch's: the embeddings are N(0, 1)
    assert default.tgt_embed.weight.abs().max() > 1


def test_decoder_can_start_from_the_encoder_final_state():
    torch.manual_seed(0)
    model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, **BRIDGE)
    src, lengths = make_batch(seed=0)
    source = model.encode(src, lengths)
    states = source.memory
    rows = torch.arange(len(src))
    forward_last, backward_first = states[rows, lengths - 1, :4], states[:, 0, 4:]
    state = model.initial_state(source)
    torch.testing.assert_close(state.h[0], torch.cat([forward_last, backward_first], -1))
    assert state.c.abs().sum() > 0 and not state.feed.any()
    zeros = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, encoder=BILSTM_4)
    assert not zeros.initial_state(zeros.encode(src, lengths)).h.any()
    with pytest.raises(ValueError, match="2 encoder.hidden_dim == hidden_dim"):
        Seq2Seq(20, 20, embed_dim=8, hidden_dim=8,
                encoder=SourceEncoderOptions(kind="bilstm", hidden_dim=8), decoder_init="encoder")
    with pytest.raises(ValueError, match="valid: zeros, encoder"):
        Seq2Seq(20, 20, decoder_init="mean")


@pytest.mark.parametrize("output", ["soft", "full_joint", "beam_joint"])
def test_loss_is_the_smoothed_cross_entropy_of_the_real_target_tokens(output):
    torch.manual_seed(0)
    model = Seq2Seq(20, 20, embed_dim=8, hidden_dim=8, input_feed=True, output=output,
                    joint_k=2)
    src, lengths = make_batch(seed=1)
    tgt_out, _ = make_batch(seed=2)  # padded rows of different lengths
    tgt_in = torch.cat([torch.ones_like(tgt_out[:, :1]), tgt_out[:, :-1]], 1)
    scores, _, _ = model(src, lengths, tgt_in)
    for smoothing in (0.0, 0.1):
        expected = torch.nn.functional.cross_entropy(
            scores.flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=smoothing)
        found = model.loss(src, lengths, tgt_in, tgt_out, label_smoothing=smoothing)
        torch.testing.assert_close(found, expected)
        wrong = torch.nn.functional.cross_entropy(  # counting the padding would differ
            scores.flatten(0, 1), tgt_out.flatten(), label_smoothing=smoothing)
        assert not torch.isclose(found, wrong)
