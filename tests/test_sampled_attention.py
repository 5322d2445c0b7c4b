"""Hard attention and sample-joint (Shankar et al. 2018), trained with REINFORCE: the Monte
Carlo loss and its gradient against the exact expectations by enumeration, learning, decoding,
and the shared ``Seq2Seq.loss``."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lit_structattn.models.seq2seq import Seq2Seq, SourceEncoderOptions

from .seq2seq_training import copy_task, train


def tiny(output, samples, seed=0):
    """A model and one batch: 2 sources of 3 and 2 tokens, targets of 2 tokens."""
    torch.manual_seed(seed)
    model = Seq2Seq(7, 7, embed_dim=4, hidden_dim=4, output=output, joint_k=samples,
                    input_feed=True).double().eval()
    src = torch.tensor([[3, 4, 5], [6, 3, 0]])
    lengths = torch.tensor([3, 2])
    tgt_in = torch.tensor([[1, 4], [1, 6]])
    tgt_out = torch.tensor([[4, 2], [6, 2]])
    return model, (src, lengths, tgt_in, tgt_out)


def exact_objective(model, batch, samples):
    """E_{a_1..a_M ~ P_t(a)} [estimate] summed over the target tokens, by enumerating every
    tuple of positions: the mean of log P(y | x_a) (hard) or the log of the mean of
    P(y | x_a) (sample-joint)."""
    src, lengths, tgt_in, tgt_out = batch
    _, queries, weights, source = model._teacher_forced(src, lengths, tgt_in, None)
    length = weights.shape[-1]
    log_p = model.output_layer.position_log_probs(queries, source.memory_share[:, None])
    rewards = log_p.gather(-1, tgt_out[:, :, None, None].expand(-1, -1, length, 1))[..., 0]
    total = 0
    for tuple_ in itertools.product(range(length), repeat=samples):
        chosen = rewards[..., list(tuple_)]  # [B, T, M]
        prior = weights[..., list(tuple_)].prod(-1)
        if model.output_layer.kind == "hard":
            estimate = chosen.mean(-1)
        else:
            estimate = chosen.logsumexp(-1) - math.log(samples)
        total = total + (prior * estimate).sum()
    return total


@pytest.mark.parametrize("output", ["hard", "sample_joint"])
def test_monte_carlo_loss_and_reinforce_gradient_are_unbiased(output):
    """Averaged over many draws, the sampled log-likelihood and its gradient (REINFORCE with
    the leave-one-out baseline) match the exact expectation and its gradient."""
    samples = 2
    model, batch = tiny(output, samples)
    exact = exact_objective(model, batch, samples)
    exact_grad = torch.autograd.grad(exact, list(model.parameters()), allow_unused=True)
    draws = 20000
    repeated = [t.repeat(draws, *([1] * (t.dim() - 1))) for t in batch]
    torch.manual_seed(1)
    src, lengths, tgt_in, tgt_out = repeated
    _, queries, weights, source = model._teacher_forced(src, lengths, tgt_in, None)
    estimate = model.output_layer.sampled_log_likelihood(queries, weights, source.memory_share,
                                                         tgt_out)
    mean = estimate.masked_select(tgt_out != 0).sum() / draws
    grad = torch.autograd.grad(mean, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(mean, exact, rtol=0.01, atol=0.01)
    flat = torch.cat([g.flatten() for g in grad if g is not None])
    flat_exact = torch.cat([g.flatten() for g, m in zip(exact_grad, grad, strict=True)
                            if m is not None])
    assert torch.linalg.vector_norm(flat - flat_exact) < 0.03 * torch.linalg.vector_norm(flat_exact)


@pytest.mark.parametrize("output", ["hard", "sample_joint"])
def test_sampled_outputs_learn_a_copy_task_and_decode(output):
    torch.manual_seed(2)
    model = Seq2Seq(12, 12, embed_dim=16, hidden_dim=16, output=output, joint_k=6,
                    input_feed=True, encoder=SourceEncoderOptions(kind="bilstm", hidden_dim=8))
    src, lengths, tgt_in, tgt_out = copy_task(model)
    losses = train(model, src, lengths, tgt_in, tgt_out, steps=100)
    assert losses[-1] < 0.3 * losses[0]
    model.eval()
    tokens = model.beam_search(src, lengths, max_len=8, beam=3)
    assert (tokens[:, :5] == src).float().mean() > 0.5


def test_hard_decoding_attends_to_the_mode_and_sample_joint_to_the_top_k():
    """When decoding, ``hard`` is beam-joint with K = 1 and ``sample_joint`` beam-joint with
    K = ``joint_k``."""
    batch = None
    for output, equivalent_k in (("hard", 1), ("sample_joint", 3)):
        model, batch = tiny(output, 3)
        reference, _ = tiny("beam_joint", equivalent_k)
        reference.load_state_dict(model.state_dict())
        src, lengths, tgt_in, _ = batch
        torch.testing.assert_close(model(src, lengths, tgt_in)[0],
                                   reference(src, lengths, tgt_in)[0])


def test_loss_is_label_smoothed_cross_entropy_plus_the_attention_penalty():
    torch.manual_seed(3)
    model = Seq2Seq(9, 9, embed_dim=4, hidden_dim=4, attention="segmentation")
    with torch.no_grad():
        model.attention.pairwise.copy_(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
    src = torch.tensor([[3, 4, 5], [6, 3, 0]])
    lengths = torch.tensor([3, 2])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
    tgt_out = torch.tensor([[4, 5, 2], [6, 2, 0]])
    scores, _, _ = model(src, lengths, tgt_in)
    expected = torch.nn.functional.cross_entropy(scores.flatten(0, 1), tgt_out.flatten(),
                                                 ignore_index=0, label_smoothing=0.1)
    penalty = 0.005 * (1 + 4 + 0.25 + 9)
    torch.testing.assert_close(model.loss(src, lengths, tgt_in, tgt_out, label_smoothing=0.1),
                               expected + penalty)


def test_sampled_outputs_need_two_samples():
    model, batch = tiny("hard", 1)
    with pytest.raises(ValueError, match="joint_k >= 2"):
        model.loss(*batch)
