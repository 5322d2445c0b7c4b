"""The Transformer encoder-decoder (issue 49, item 5): step-by-step decoding equals teacher
forcing, padding changes nothing, the cross-attention obeys its transform, the loss falls, the
searches run on it, bad options are refused, and the translation application trains and tests
it through the CLI with every metric (test/sparsity among them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lit_structattn.metrics import AttentionSparsity
from lit_structattn.models.seq2seq import TransformerSeq2Seq, search
from lit_structattn.models.seq2seq.transformer import causal_blocked, sinusoids
from lit_structattn.run.lightning_cli import build_cli

from .test_translation_task import corpus, tiny  # noqa: F401 (the fixture)

TRANSFORMS = ("softmax", "sparsemax", "entmax15")
CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "translation"


def small(cross_attention: str = "softmax", **options) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    settings = dict(embed_dim=16, num_heads=4, ffn_dim=32, encoder_layers=2, decoder_layers=2,
                    cross_attention=cross_attention, dropout=0.0)
    return TransformerSeq2Seq(30, 30, **{**settings, **options}).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``src [3, 7]`` with lengths 7, 5, 3 (0 = padding) and ``tgt_in [3, 6]``."""
    generator = torch.Generator().manual_seed(1)
    lengths = torch.tensor([7, 5, 3])
    src = torch.randint(3, 30, (3, 7), generator=generator)
    src[torch.arange(7) >= lengths[:, None]] = 0
    return src, lengths, torch.randint(3, 30, (3, 6), generator=generator)


def test_positions_and_the_causal_mask():
    table = sinusoids(5, 4)
    assert torch.allclose(table[:, 0], torch.arange(5.0).sin())
    assert torch.allclose(table[:, 1], torch.arange(5.0).cos())
    assert torch.allclose(sinusoids(2, 4, start=3), table[3:])
    assert causal_blocked(2, 3).tolist() == [[False] * 4 + [True], [False] * 5]


@pytest.mark.parametrize("name", TRANSFORMS)
def test_step_decoding_equals_teacher_forcing(name):
    """The cached step (one position, the earlier layers' inputs as keys) gives the scores and
    attention of the whole-sequence pass, at every position."""
    model = small(name)
    src, lengths, tgt = batch()
    scores, weights, source = model(src, lengths, tgt)
    state, stepped, attention = model.initial_state(source), [], []
    for t in range(tgt.shape[1]):
        step_scores, state, step_weights = model.decode_step(tgt[:, t], state, source)
        stepped.append(step_scores)
        attention.append(step_weights)
    assert state.position == tgt.shape[1]
    torch.testing.assert_close(torch.stack(stepped, 1), scores, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.stack(attention, 1), weights, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_cross_attention_obeys_its_transform_and_the_padding(name):
    model = small(name)
    src, lengths, tgt = batch()
    _, weights, _ = model(src, lengths, tgt)  # [B, T, S], the last layer's head average
    real = torch.arange(7) < lengths[:, None]
    assert (weights[~real[:, None].expand_as(weights)] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))
    heads = model.layers[-1].cross_attention
    query = model.layers[-1].norm_cross(torch.randn(3, 6, 16))
    memory = model.encode(src, lengths).memory
    _, per_head = heads(query, memory, memory, key_padding_mask=~real,
                        average_attn_weights=False)
    zeros = (per_head == 0) & real[:, None, None]
    assert bool(zeros.any()) == (name != "softmax")  # sparse transforms: exact zeros


@pytest.mark.parametrize("name", TRANSFORMS)
def test_padding_changes_nothing(name):
    """More source padding leaves every row's scores as they were; later target positions
    (padding included) leave the earlier ones as they were (causal self-attention)."""
    model = small(name)
    src, lengths, tgt = batch()
    scores, weights, _ = model(src, lengths, tgt)
    padded = torch.cat([src, torch.zeros(3, 4, dtype=src.dtype)], 1)
    more, more_weights, _ = model(padded, lengths, tgt)
    torch.testing.assert_close(more, scores, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(more_weights[..., :7], weights)
    shorter, _, _ = model(src, lengths, tgt[:, :4])
    torch.testing.assert_close(shorter, scores[:, :4], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", TRANSFORMS)
def test_loss_falls(name):
    model = small(name).train()
    src, lengths, tgt = batch()
    target = torch.cat([tgt[:, 1:], torch.full((3, 1), model.eos_id)], 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(40):
        loss = model.loss(src, lengths, tgt, target, label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_searches_decode_it():
    """Greedy decoding and a beam search of width 1 agree; a beam of 3 returns one hypothesis
    per source, each ending with <eos> or the length limit."""
    model = small("sparsemax")
    src, lengths, _ = batch()
    tokens, attention = model.greedy(src, lengths, max_len=8)
    assert tokens.shape[0] == 3 and attention.shape == (3, tokens.shape[1], 7)
    one = search.beams(model, src, lengths, 8, beam=1).best()
    width = min(one.shape[1], tokens.shape[1])
    assert torch.equal(one[:, :width], tokens[:, :width])
    assert model.beams(src, lengths, 8, beam=3).best().shape[0] == 3


def test_refusals_say_why():
    with pytest.raises(ValueError, match="constrained"):
        small("csparsemax")
    with pytest.raises(ValueError, match="even"):
        small(embed_dim=15, num_heads=3)
    model = small()
    src, lengths, tgt = batch()
    with pytest.raises(ValueError, match="fertilities"):
        model(src, lengths, tgt, fertility=torch.ones(3, 7))
    with pytest.raises(ValueError, match="soft output layer"):
        model(src, lengths, tgt, joint_k=2)


def test_tied_embeddings():
    model = small()
    assert model.generator.weight is model.tgt_embed.weight
    assert model.encoder.embed.weight is model.tgt_embed.weight  # one vocabulary
    other = TransformerSeq2Seq(30, 40, 16, 4, 32, 1, 1)
    assert other.encoder.embed.weight is not other.tgt_embed.weight


def test_attention_sparsity_counts_the_real_pairs_only():
    metric = AttentionSparsity()
    weights = torch.tensor([[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]])  # [1, 2, 3]
    allowed = torch.tensor([[[True, True, False], [True, True, False]]])
    metric.update(weights, allowed)  # one zero among 4 real pairs
    metric.update(weights[:, :1], torch.zeros(1, 1, 3, dtype=torch.bool))  # nothing real
    assert metric.compute().item() == pytest.approx(25.0)


def test_the_translation_task_trains_and_tests_it(corpus, tmp_path):  # noqa: F811
    """configs/translation/transformer.yaml on top of base.yaml through the CLI: every test
    metric, the sparsity among them, and entmax15 cross-attention."""
    cli = build_cli([*tiny(corpus, tmp_path, "softmax"),  # the LSTM's sizes are dropped
                     "--config", str(CONFIGS / "transformer.yaml"),
                     "--model.init_args.model.init_args.embed_dim", "16",
                     "--model.init_args.model.init_args.ffn_dim", "32",
                     "--model.init_args.model.init_args.cross_attention", "entmax15",
                     "--model.init_args.optimizer.init_args.lr", "0.01",
                     "--trainer.max_epochs", "2"], run=False)
    assert isinstance(cli.model.model, TransformerSeq2Seq)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    (metrics,) = cli.trainer.test(cli.model, datamodule=cli.datamodule, ckpt_path="best",
                                  verbose=False)
    assert set(metrics) == {"test/bleu", "test/chrf", "test/rep", "test/drop", "test/ppl",
                            "test/sparsity", "test/score"}
    assert 0 <= metrics["test/sparsity"] <= 100 and 1 < metrics["test/ppl"] < 60


def test_its_report_says_there_is_no_paper_to_judge():
    """A table with no paper's numbers and no claims (transformer_nmt) says so where a paper's
    table shows its claims, and its cells end without "then the paper's number"."""
    from lit_structattn.reproduce.report import render
    from lit_structattn.reproduce.tables import TABLES

    table = TABLES["transformer_nmt"]
    run = {"metrics": {"test/bleu": 30.0, "test/sparsity": 50.0, "train/step_ms": 400.0},
           "wall_seconds": 60.0, "seed": 0}
    report = render(table, "cpu", range(1), {row.name: [run] for row in table.rows})
    assert "**Claims:** none: this table compares this library's own rows" in report
    assert "the paper's number" not in report
    assert "| entmax15 | 30.0 | — | — | — | 50.0 | 400.0 | 1 |" in report
