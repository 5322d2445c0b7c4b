"""Tree transduction data (prefix -> infix formulas) and the length-to-failure metric."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lit_structattn.datamodules.tree_transduction import (
    TreeTransductionDataModule,
    expression_depth,
    formula_vocabulary,
    infix_tokens,
    parse_prefix,
    prefix_tokens,
    random_expression,
)
from lit_structattn.metrics import LengthToFailure

PAPER_PREFIX = "( * ( + ( + 15 7 ) 1 8 ) ( + 19 0 11 ) )".split()
PAPER_INFIX = "( ( 15 + 7 ) + 1 + 8 ) * ( 19 + 0 + 11 )".split()
NUMBERS = {str(n) for n in range(21)}


def prefix_to_infix(tokens: list[str]) -> list[str]:
    return infix_tokens(parse_prefix(tokens))


def check_prefix(tokens: list[str]) -> tuple[list[str], int]:
    """Independent checker: validate a prefix formula and return ``(infix tokens, depth)``.

    A stack of open expressions ``[operator, [argument token lists]]``; on ``)`` the top one is
    rendered in parentheses and becomes an argument of the one below. Depth is the maximum number
    of simultaneously open parentheses.
    """
    stack: list[list] = []
    depth = 0
    result = None
    position = 0
    while position < len(tokens):
        token = tokens[position]
        assert result is None, "tokens after the end of the formula"
        if token == "(":
            assert tokens[position + 1] in ("+", "*")
            stack.append([tokens[position + 1], []])
            depth = max(depth, len(stack))
            position += 2
            continue
        if token == ")":
            op, args = stack.pop()
            assert 2 <= len(args) <= 4, f"{len(args)} arguments"
            joined = [t for i, arg in enumerate(args) for t in ([op] if i else []) + arg]
            rendered = joined if not stack else ["(", *joined, ")"]
        else:
            assert token in NUMBERS, token
            rendered = [token]
        if stack:
            stack[-1][1].append(rendered)
        else:
            result = rendered
        position += 1
    assert not stack and result is not None
    return result, depth


def small_dm(**kwargs) -> TreeTransductionDataModule:
    args = dict(train_per_depth=40, train_depths=(2, 4), eval_per_depth=10, eval_depths=(2, 6),
                batch_size=8)
    dm = TreeTransductionDataModule(**{**args, **kwargs})
    dm.setup("fit")
    return dm


# ----------------------------------------------------------------------------- formulas


def test_paper_example():
    assert prefix_to_infix(PAPER_PREFIX) == PAPER_INFIX
    assert expression_depth(parse_prefix(PAPER_PREFIX)) == 3
    assert prefix_tokens(parse_prefix(PAPER_PREFIX)) == PAPER_PREFIX
    assert check_prefix(PAPER_PREFIX) == (PAPER_INFIX, 3)


@pytest.mark.parametrize("bad", ["( + 1 )", "( + 1 2 3 4 5 )", "( + 1 2", "1 2", "( 1 2 )", "21"])
def test_parse_rejects_malformed(bad):
    with pytest.raises(ValueError):
        parse_prefix(bad.split())


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), depth=st.integers(1, 6), nest_prob=st.sampled_from([0, .3, .9]))
def test_generated_formula_has_exact_depth_and_valid_arity(seed, depth, nest_prob):
    expression = random_expression(depth, random.Random(seed), nest_prob)
    prefix = prefix_tokens(expression)
    infix, checked_depth = check_prefix(prefix)  # also asserts 2..4 arguments and numbers 0..20
    assert checked_depth == depth == expression_depth(expression)
    assert infix == infix_tokens(expression) == prefix_to_infix(prefix)


def test_datamodule_formulas_are_consistent():
    dm = small_dm()
    for dataset in dm.datasets.values():
        for formula in dataset.formulas:
            assert check_prefix(list(formula.prefix)) == (list(formula.infix), formula.depth)


def test_nest_prob_zero_gives_a_single_path():
    for seed in range(20):
        prefix = prefix_tokens(random_expression(4, random.Random(seed), 0.0))
        assert prefix.count("(") == 4


# ----------------------------------------------------------------------------- splits


def prefixes(dm: TreeTransductionDataModule, split: str) -> list[tuple[str, ...]]:
    return [f.prefix for f in dm.datasets[split].formulas]


def test_split_sizes_and_depths():
    dm = small_dm(train_per_depth=7, train_depths=(1, 3), eval_per_depth=3, eval_depths=(2, 5))
    depths = {split: [f.depth for f in dm.datasets[split].formulas] for split in dm.datasets}
    assert sorted(depths["train"]) == [d for d in (1, 2, 3) for _ in range(7)]
    for split in ("val", "test"):
        assert sorted(depths[split]) == [d for d in (2, 3, 4, 5) for _ in range(3)]


def test_splits_are_disjoint_and_unique():
    dm = small_dm()
    all_prefixes = [p for split in ("train", "val", "test") for p in prefixes(dm, split)]
    assert len(set(all_prefixes)) == len(all_prefixes)


def test_determinism_and_seed_dependence():
    a, b, c = small_dm(seed=3), small_dm(seed=3), small_dm(seed=4)
    for split in ("train", "val", "test"):
        assert prefixes(a, split) == prefixes(b, split)
        assert prefixes(a, split) != prefixes(c, split)


def test_paper_sizes_are_default():
    dm = TreeTransductionDataModule()
    dm.setup("fit")
    assert [len(dm.datasets[s]) for s in ("train", "val", "test")] == [15000, 1000, 1000]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"train_per_depth": 0},
        {"eval_per_depth": -1},
        {"batch_size": 0},
        {"train_depths": (3, 2)},
        {"eval_depths": (0, 2)},
        {"eval_depths": (2, 3, 4)},
        {"train_depths": 4},
        {"num_workers": -1},
        {"nest_prob": 1.0},
    ],
)
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        TreeTransductionDataModule(**kwargs)


def test_loader_before_setup_raises():
    with pytest.raises(RuntimeError, match="setup"):
        TreeTransductionDataModule().train_dataloader()


# ----------------------------------------------------------------------------- batches and vocab


def test_vocab_layout_and_round_trip():
    vocab = formula_vocabulary()
    assert len(vocab) == 28
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    assert vocab.tokens[3:] == ["(", ")", "+", "*", *(str(n) for n in range(21))]
    assert vocab.decode(vocab.encode(PAPER_PREFIX)) == PAPER_PREFIX
    ids = [vocab.bos_id, *vocab.encode(PAPER_INFIX), vocab.eos_id, *vocab.encode(["1"]), 0]
    assert vocab.decode(torch.tensor(ids)) == PAPER_INFIX
    with pytest.raises(KeyError):
        vocab.encode(["$"])


def test_batches():
    dm = small_dm()
    vocab = dm.vocab
    by_prefix = {tuple(f.prefix): f for f in dm.datasets["test"].formulas}
    seen: list[tuple[str, ...]] = []
    previous_width = 0
    for batch in dm.test_dataloader():
        size = batch["src"].shape[0]
        src, tgt_in, tgt_out = batch["src"], batch["tgt_in"], batch["tgt_out"]
        src_len, tgt_len = batch["src_lengths"], batch["tgt_lengths"]
        assert all(t.dtype == torch.long for t in batch.values())
        assert tgt_in.shape == tgt_out.shape and tgt_len.shape == src_len.shape == (size,)
        assert src.shape[1] == src_len.max() and tgt_in.shape[1] == tgt_len.max()
        src_pad = torch.arange(src.shape[1]) >= src_len[:, None]
        tgt_pad = torch.arange(tgt_in.shape[1]) >= tgt_len[:, None]
        assert (src[src_pad] == 0).all() and (src[~src_pad] != 0).all()
        assert (tgt_in[tgt_pad] == 0).all() and (tgt_out[tgt_pad] == 0).all()
        assert (tgt_in[:, 0] == vocab.bos_id).all()
        assert (tgt_out.gather(1, tgt_len[:, None] - 1) == vocab.eos_id).all()
        assert (tgt_in[:, 1:][~tgt_pad[:, 1:]] == tgt_out[:, :-1][~tgt_pad[:, 1:]]).all()
        assert src.shape[1] >= previous_width  # evaluation batches come shortest first
        previous_width = src.shape[1]
        for row in range(size):
            formula = by_prefix[tuple(vocab.decode(src[row]))]
            assert vocab.decode(tgt_in[row]) == vocab.decode(tgt_out[row]) == list(formula.infix)
            assert tgt_len[row] == len(formula.infix) + 1 and batch["depth"][row] == formula.depth
            seen.append(tuple(formula.prefix))
    assert sorted(seen) == sorted(by_prefix)
    assert len(list(dm.predict_dataloader())) == len(list(dm.test_dataloader()))


def test_train_loader_shuffles_every_example_once():
    dm = small_dm(batch_size=16)
    torch.manual_seed(0)
    batches = list(dm.train_dataloader())
    assert sum(b["src"].shape[0] for b in batches) == len(dm.datasets["train"])
    assert batches[0]["src_lengths"].tolist() != [
        len(f.prefix) for f in dm.datasets["train"].formulas[:16]
    ]


# ----------------------------------------------------------------------------- metric


def ltf(pred, gold, lengths, depth) -> dict:
    """``LengthToFailure(6)`` over one batch given as nested lists, as floats."""
    pred = torch.tensor(pred, dtype=torch.long).reshape(len(gold), -1)
    metric = LengthToFailure(6)
    metric.update(pred, torch.tensor(gold), torch.tensor(lengths), torch.tensor(depth))
    return {key: float(value) for key, value in metric.compute().items()}


GOLD = [[5, 6, 7, 2]]  # three tokens + <eos>


@pytest.mark.parametrize(
    "pred, expected",
    [
        ([[5, 6, 7, 2]], 1.0),  # perfect
        ([[9, 6, 7, 2]], 0.0),  # first token wrong
        ([[5, 6, 9, 2]], 0.5),  # two right, then an error
        ([[5, 6]], 0.5),  # shorter: missing positions are errors
        ([[]], 0.0),  # empty prediction
        ([[5, 6, 7, 2, 4, 4]], 1.0),  # longer: tokens after gold's <eos> are ignored
        ([[5, 6, 7, 8, 2]], 0.75),  # longer: missed <eos>
    ],
)
def test_metric_single_example(pred, expected):
    assert ltf(pred, GOLD, [4], [3]) == pytest.approx({3: expected, "all": expected})


def test_metric_ignores_gold_padding_and_averages_per_depth():
    gold = [[5, 6, 2, 0, 0], [5, 6, 7, 8, 2], [3, 2, 0, 0, 0]]
    pred = [[5, 6, 2, 9, 9], [5, 6, 9, 8, 2], [4, 2, 0, 0, 0]]
    result = ltf(pred, gold, [3, 5, 2], [2, 2, 4])
    assert result == pytest.approx({2: (1.0 + 0.4) / 2, 4: 0.0, "all": 1.4 / 3})


def test_metric_merging_states_equals_one_pass():
    gen = torch.Generator().manual_seed(0)
    gold = torch.randint(3, 8, (12, 9), generator=gen)
    pred = torch.where(torch.rand(12, 9, generator=gen) < 0.9, gold, 0)
    lengths = torch.randint(1, 10, (12,), generator=gen)
    depth = torch.randint(2, 7, (12,), generator=gen)
    whole, first, second = LengthToFailure(6), LengthToFailure(6), LengthToFailure(6)
    whole.update(pred, gold, lengths, depth)
    first.update(pred[:5], gold[:5], lengths[:5], depth[:5])
    second.update(pred[5:], gold[5:], lengths[5:], depth[5:])
    # the DDP "sum" reduction of the states, then torchmetrics' own merge
    assert torch.equal(first.count + second.count, whole.count)
    assert torch.allclose(first.score_sum + second.score_sum, whole.score_sum)
    first.merge_state(second)
    merged, expected = first.compute(), whole.compute()
    assert merged.keys() == expected.keys() and len(expected) > 2
    assert all(torch.allclose(merged[key], expected[key]) for key in expected)


def test_metric_rejects_bad_inputs():
    metric = LengthToFailure(4)
    gold = torch.tensor([[5, 2]])
    with pytest.raises(ValueError, match="depth"):
        metric.update(gold, gold, torch.tensor([2]), torch.tensor([5]))
    with pytest.raises(ValueError, match="gold_lengths"):
        metric.update(gold, gold, torch.tensor([3]), torch.tensor([2]))
    with pytest.raises(ValueError):
        metric.update(gold[0], gold, torch.tensor([2]), torch.tensor([2]))
    with pytest.raises(ValueError):
        LengthToFailure(0)
