"""Every model family trains with every attention the registry says it takes: one cell per
(family, role, name) of :data:`lit_structattn.layers.registry.FAMILIES`, each one optimizer step
on a tiny padded batch with a finite loss and finite, non-zero gradients."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.attention import TRANSFORMS
from lit_structattn.layers.registry import FAMILIES
from lit_structattn.models.decomposable import SUPERVISED, DecomposableAttention
from lit_structattn.models.easy_first import EasyFirstDecoderOptions, EasyFirstTagger
from lit_structattn.models.memory_network import build_memory_model
from lit_structattn.models.parser import DependencyParser, ParserOptions
from lit_structattn.models.pooling import AttentionPoolingClassifier
from lit_structattn.models.seq2seq import Seq2Seq, SourceEncoderOptions
from lit_structattn.models.tagging_encoder import TaggingEncoderOptions

LENGTHS = torch.tensor([5, 3])
CONSTRAINED = {name for name, transform in TRANSFORMS.items() if transform.constrained}


def tokens(vocab: int, lengths: torch.Tensor = LENGTHS, low: int = 4) -> torch.Tensor:
    """Random ids ``[B, max(lengths)]`` in ``[low, vocab)``, 0 after each length."""
    ids = torch.randint(low, vocab, (len(lengths), int(lengths.max())))
    return ids.masked_fill(torch.arange(ids.shape[1])[None] >= lengths[:, None], 0)


def seq2seq_loss(role: str, name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    options = {"attention": "softmax", "source_attention": "none", "output": "soft"}
    options[role] = name
    encoder = SourceEncoderOptions(hidden_dim=8, parser_dim=8,
                                   source_attention=options.pop("source_attention"))
    model = Seq2Seq(12, 12, embed_dim=8, hidden_dim=8, encoder=encoder,
                    sink=options["attention"] in CONSTRAINED, joint_k=3,
                    input_feed=True, **options)
    target = torch.cat([torch.ones(2, 1, dtype=torch.long), tokens(12, torch.tensor([4, 2])),
                        torch.zeros(2, 1, dtype=torch.long)], 1)
    target[torch.arange(2), torch.tensor([5, 3])] = 2  # EOS after the words
    return model, model.loss(tokens(12), LENGTHS, target[:, :-1], target[:, 1:])


def classifier_loss(role: str, name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    model = AttentionPoolingClassifier(12, 3, embed_dim=8, hidden_dim=8, transform=name)
    logits, _ = model(tokens(12), LENGTHS)
    return model, torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2]))


def easy_first_loss(role: str, name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    model = EasyFirstTagger(
        12, 4, encoder=TaggingEncoderOptions(word_dim=8, hidden_dim=8, use_affixes=False),
        decoder=EasyFirstDecoderOptions(attention=name, sketch_dim=8, preattention_dim=8),
        dropout=0.0)
    words = tokens(12, low=2)
    tags = torch.randint(1, 4, words.shape).masked_fill(words == 0, 0)
    return model, model.loss(model(words, LENGTHS), tags, LENGTHS)


def memory_network_loss(role: str, name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    model = build_memory_model(name, 12, hops=2, embed_dim=8, memory_size=6)
    story_lengths = torch.tensor([4, 2])
    sentence_lengths = torch.tensor([[3, 2, 4, 1], [2, 3, 0, 0]])
    words = torch.arange(4)[None, None] < sentence_lengths[..., None]  # [B, n, L]
    story = torch.randint(4, 12, (2, 4, 4)).masked_fill(~words, 0)
    output = model(story, story_lengths, sentence_lengths, tokens(12, torch.tensor([3, 2])),
                   torch.tensor([3, 2]))
    return model, torch.nn.functional.cross_entropy(output.logits, torch.tensor([5, 7]))


def nli_loss(role: str, name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    options = {"intra": "none", "inter": "softmax"}
    options[role] = name
    model = DecomposableAttention(12, embed_dim=8, hidden_dim=8, parser=ParserOptions(8, 8),
                                  dropout=0.0, **options)
    if options["intra"] in SUPERVISED:
        model.attach_parser(DependencyParser(12, ParserOptions(8, 8)), torch.arange(12))
    hypothesis_lengths = torch.tensor([2, 4])
    output = model(tokens(12), LENGTHS, tokens(12, hypothesis_lengths), hypothesis_lengths)
    return model, torch.nn.functional.cross_entropy(output.logits, torch.tensor([0, 2]))


STEPS = {"seq2seq": seq2seq_loss, "classifier": classifier_loss, "easy_first": easy_first_loss,
         "memory_network": memory_network_loss, "nli": nli_loss}
CELLS = [(family, role, name) for family, roles in FAMILIES.items()
         for role, names in roles.items() for name in names]


def test_every_family_has_a_step():
    assert set(STEPS) == set(FAMILIES)


@pytest.mark.parametrize(("family", "role", "name"), CELLS)
def test_one_training_step(family, role, name):
    torch.manual_seed(0)
    model, loss = STEPS[family](role, name)
    assert loss.dim() == 0 and torch.isfinite(loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    optimizer.step()
