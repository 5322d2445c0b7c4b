"""Figures a person learns from: a latent parse is drawn as a tree only when the tree is not
flat (otherwise the soft parents, with the argmax heads ringed); labels stay readable (no font
below 6 points, no two labels overlapping, none empty) on short and long inputs; and every
family's ``attention_figures`` draw from a model trained for two steps through its configs."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.image import AxesImage
from matplotlib.text import Annotation

from lit_structattn.figures.callbacks import median_examples
from lit_structattn.figures.plots import (
    AttentionMap,
    Parse,
    Raindrop,
    busiest_head,
    plot_figure,
    plot_parse,
    says_something,
)

from .golden import CASES, case_cli

READABLE_POINTS = 6.0  # the smallest label a reader can read at TensorBoard's 100 dpi

WORDS = "( + 12 ( * 3 4 ) 5 )".split()
#: A real tree of WORDS: the operators head their arguments, the brackets hang from their
#: operator, the outer operator from the root.
TREE = [0, 2, 0, 2, 5, 2, 5, 5, 5, 2, 2]
FLAT = [0] * (len(WORDS) + 1)  # every word on the root (saturated root scores)
STAR = [0, 0, *[1] * (len(WORDS) - 1)]  # every word but one on the first word


def words_of(axes) -> list:
    """The words written on a parse's axes (not its arrows, annotations without text)."""
    return [text for text in axes.texts if not isinstance(text, Annotation)]


def parse(heads: list[int]) -> Parse:
    parents = torch.softmax(torch.randn(len(WORDS), len(WORDS) + 1,
                                        generator=torch.Generator().manual_seed(0)), -1)
    return Parse("Eisner argmax parse", ["$", *WORDS], heads, parents)


def test_flat_trees_are_told_from_real_ones():
    assert not says_something(FLAT) and busiest_head(FLAT) == (0, len(WORDS))
    assert not says_something(STAR) and busiest_head(STAR) == (1, len(WORDS) - 1)
    assert says_something(TREE) and busiest_head(TREE) == (2, 5)
    assert says_something([0, 2, 0, 2])  # "I saw him": 2 of 3 words on "saw"
    assert not says_something([0, 0])  # one word: nothing to show
    assert not says_something([0])


@pytest.mark.parametrize("heads", [FLAT, STAR], ids=["root", "star"])
def test_a_flat_tree_gives_the_soft_parents_with_the_argmax_ringed(heads):
    figure = plot_figure(parse(heads))
    axes = figure.axes[0]
    (image,) = [child for child in axes.get_children() if isinstance(child, AxesImage)]
    assert image.get_array().shape == (len(WORDS), len(WORDS) + 1)
    assert [label.get_text() for label in axes.get_yticklabels()] == WORDS
    assert [label.get_text() for label in axes.get_xticklabels()] == ["$", *WORDS]
    head, count = busiest_head(heads)
    title = axes.get_title().replace("\n", " ")
    on = "the root" if head == 0 else repr(WORDS[head - 1])
    assert f"{count} of {len(WORDS)} words on {on}" in title
    assert title.endswith("soft parents, argmax ringed")  # not cut
    (rings,) = axes.lines
    assert rings.get_xdata().tolist() == heads[1:]  # each word's argmax head, ringed
    assert rings.get_ydata().tolist() == list(range(len(WORDS)))
    assert axes.get_xlim() == pytest.approx((-0.5, len(WORDS) + 0.5))  # no autoscaling
    plt.close(figure)


def test_a_real_tree_is_drawn_as_arcs():
    figure = plot_figure(parse(TREE))
    axes = figure.axes[0]
    assert not axes.images and axes.get_title() == "Eisner argmax parse"
    assert [text.get_text() for text in words_of(axes)] == ["$", *WORDS]
    assert len(axes.patches) == len(WORDS)  # one arc per word
    plt.close(figure)


def test_other_items_are_refused_with_the_drawable_ones():
    with pytest.raises(TypeError, match="AttentionMap, Raindrop or Parse"):
        plot_figure((["$", "a"], [0, 0], "a parse as a tuple"))


def readable(figure, labels) -> None:
    """No label of ``labels`` is empty or smaller than READABLE_POINTS, and no two overlap."""
    figure.canvas.draw()
    assert labels and all(label.get_text() for label in labels)
    assert min(label.get_fontsize() for label in labels) >= READABLE_POINTS
    boxes = [label.get_window_extent() for label in labels]
    for first, second in itertools.pairwise(boxes):
        assert not first.overlaps(second), (first, second)


@pytest.mark.parametrize("words", [3, 30, 150])
def test_labels_are_readable(words):
    tokens = [f"word{i}" if i % 7 else "a-rather-long-token" for i in range(words)]
    heatmap = plot_figure(AttentionMap("t", torch.rand(words, words), tokens, tokens,
                                       highlight_rows=[words - 1]))
    axes = heatmap.axes[0]
    readable(heatmap, axes.get_yticklabels())
    readable(heatmap, axes.get_xticklabels())
    step = int(axes.get_yticks()[1] - axes.get_yticks()[0])
    assert (step == 1) == (words <= 30)  # 150 rows: every k-th labelled
    red = [label.get_text() for label in axes.get_yticklabels() if label.get_color() == "tab:red"]
    assert red == ([tokens[-1]] if (words - 1) % step == 0 else [])
    raindrop = plot_figure(Raindrop("t", torch.rand(words, words), tokens))
    readable(raindrop, raindrop.axes[1].get_xticklabels())
    readable(raindrop, raindrop.axes[0].get_yticklabels())
    tree = plot_parse(["$", *tokens], [0, *range(words)], "a chain")
    readable(tree, words_of(tree.axes[0]))
    for figure in (heatmap, raindrop, tree):
        plt.close(figure)


FAMILIES = ["tree_structured", "nli_structured", "easy_first_nef_crf_f_csoftmax",
            "translation_beam_joint", "babi_binary_crf"]


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_draws_its_figures(name, tmp_path):
    """Each family's golden configuration, trained for two steps: its ``attention_figures``
    of two median validation examples all draw, with a title and nothing empty."""
    extra = ("--trainer.max_steps", "2", "--trainer.limit_val_batches", "1")
    with case_cli(CASES[name], tmp_path, extra) as cli:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    datamodule = cli.datamodule
    examples = datamodule.datasets["val"]
    batch = datamodule.collate([examples[i] for i in median_examples(examples.lengths, 2)])
    items = cli.model.eval().attention_figures(batch, getattr(datamodule, "vocab", None), 2)
    assert items
    for tag, item in items:
        figure = plot_figure(item)
        axes = figure.axes[0]
        assert axes.get_title(), tag
        texts = [*axes.get_yticklabels(), *axes.get_xticklabels(), *words_of(axes)]
        assert texts and all(text.get_text() for text in texts), tag
        plt.close(figure)
