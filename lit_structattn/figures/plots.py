"""Matplotlib figures of attention: heatmaps, raindrop plots and dependency parses (used by the
TensorBoard callback and the notebook).

Every figure must be readable as drawn: it grows with its input up to :data:`MAX_SIZE`, its
labels shrink with their cells down to :data:`MIN_POINTS` and, on denser axes, only every k-th
cell is labelled; titles wrap in at most :data:`TITLE_LINES` lines. A latent parse
(:class:`Parse`) is drawn as a tree only when the tree says something (:func:`says_something`);
a flat one, with (nearly) every word on one head, gives way to the soft parents the model uses.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import Tensor  # noqa: E402


@dataclass
class AttentionMap:
    """One heatmap: ``weights [rows, cols]`` with a label per row and column; the labels of
    ``highlight_rows`` are drawn in red (e.g. repeated output words)."""

    title: str
    weights: Tensor
    row_labels: Sequence[str]
    col_labels: Sequence[str]
    highlight_rows: Sequence[int] = ()


@dataclass
class Raindrop:
    """The attention of every easy-first sketch step: ``attention [steps, words]``."""

    title: str
    attention: Tensor
    words: Sequence[str]


@dataclass
class Parse:
    """A latent dependency parse of ``tokens`` (the root ``$`` first): the argmax tree ``heads``
    (``heads[m]`` the head of word ``m``, 0 = root; ``heads[0]`` ignored) and the soft parents
    the model uses, ``parents [words, 1 + words]`` (row ``m - 1``: p(head | word ``m``), a
    column per head, the root's first)."""

    title: str
    tokens: Sequence[str]
    heads: Sequence[int]
    parents: Tensor


def plot_figure(item: AttentionMap | Raindrop | Parse) -> Figure:
    """Draw one item of a task's ``attention_figures``: a heatmap, a raindrop plot, or a latent
    parse (:func:`plot_latent_parse`)."""
    if isinstance(item, AttentionMap):
        return plot_attention(item)
    if isinstance(item, Raindrop):
        return plot_raindrop(item.words, item.attention, item.title)
    if isinstance(item, Parse):
        return plot_latent_parse(item)
    raise TypeError(f"cannot draw a {type(item).__name__}: an AttentionMap, Raindrop or Parse")


#: The largest figure drawn, ``(width, height)`` in inches: longer inputs get smaller cells
#: and labels instead.
MAX_SIZE = (14.0, 12.0)
LABEL_POINTS = 7.0  # tick labels at full size (smaller when the cells shrink)
TITLE_POINTS = 9.0
MIN_POINTS = 6.0  # the smallest label drawn: denser axes label every k-th cell instead
MIN_WIDTH = 5.5  # inches: a heatmap of a few columns still has room for its title
MAX_LABEL_CHARS = 40  # longer tick labels are shortened
TITLE_LINES = 2  # longer titles are shortened
CHAR_WIDTH = 0.6  # a character's width in ems (DejaVu Sans, generously)


def _zero_white_cmap():
    """Blues, with values below the colour range (exact zeros, as ``vmin`` is 1e-9) in white."""
    return plt.get_cmap("Blues").with_extremes(under="white")


def _shorten(labels: Sequence[str]) -> list[str]:
    """``labels`` as strings of at most :data:`MAX_LABEL_CHARS` characters (cut with "...")."""
    return [text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 3] + "..."
            for text in map(str, labels)]


def _text_inches(labels: Sequence[str], points: float) -> float:
    """About the width of the longest of ``labels`` at ``points``."""
    return max((len(text) for text in labels), default=0) * CHAR_WIDTH * points / 72


def _axis_fit(count: int, cell: float, room: float, points: float = LABEL_POINTS
              ) -> tuple[float, float, int]:
    """``(inches, font points, step)`` of an axis of ``count`` labelled cells of ``cell``
    inches each, shrunk (cells and font alike) to fit ``room`` inches; where the font would
    fall below :data:`MIN_POINTS` it stays there and only every ``step``-th cell is labelled."""
    inches = min(count * cell, room)
    scaled = points * inches / (count * cell) if count else points
    return inches, max(MIN_POINTS, scaled), math.ceil(MIN_POINTS / min(scaled, MIN_POINTS))


def _set_title(ax, title: str) -> None:
    """``title`` above ``ax``, wrapped to the axes' width in at most :data:`TITLE_LINES` lines
    (shortened with "..." beyond), so that it is not clipped."""
    inches = ax.get_position().width * ax.figure.get_figwidth()
    chars = max(10, int(inches * 72 / (CHAR_WIDTH * TITLE_POINTS)))
    ax.set_title(textwrap.fill(title, chars, max_lines=TITLE_LINES, placeholder=" ..."),
                 fontsize=TITLE_POINTS)


def _colorbar(image, ax) -> None:
    """A colour bar for ``image`` beside ``ax`` (one axes or a list), labelled like the axes."""
    bar = image.figure.colorbar(image, ax=ax, fraction=0.03)
    bar.ax.tick_params(labelsize=LABEL_POINTS)


def plot_attention(amap: AttentionMap, ax=None) -> Figure:
    """A heatmap of ``amap`` (white = exactly zero; a row per query, a column per position); a
    new figure grows with the map up to :data:`MAX_SIZE` (dense axes: every k-th label, the
    highlighted rows among them in red)."""
    weights = amap.weights.detach().float().cpu()[: len(amap.row_labels), : len(amap.col_labels)]
    row_labels, col_labels = _shorten(amap.row_labels), _shorten(amap.col_labels)
    rows, cols = len(row_labels), len(col_labels)
    width, col_points, col_step = _axis_fit(cols, 0.28, MAX_SIZE[0] - 4)
    height, row_points, row_step = _axis_fit(rows, 0.28, MAX_SIZE[1] - 3)
    if ax is None:
        _, ax = plt.subplots(figsize=(
            min(MAX_SIZE[0], max(MIN_WIDTH, 1.8 + _text_inches(row_labels, row_points) + width)),
            min(MAX_SIZE[1], 1.4 + _text_inches(col_labels, col_points) + height)))
    image = ax.imshow(weights.numpy(), cmap=_zero_white_cmap(), vmin=1e-9,
                      vmax=max(float(weights.max()), 1e-6),
                      aspect="auto")
    ax.set_xticks(range(0, cols, col_step), col_labels[::col_step], rotation=90,
                  fontsize=col_points)
    ax.set_yticks(range(0, rows, row_step), row_labels[::row_step], fontsize=row_points)
    highlighted = set(amap.highlight_rows)
    for row, label in zip(range(0, rows, row_step), ax.get_yticklabels(), strict=True):
        if row in highlighted:
            label.set_color("tab:red")
    _colorbar(image, ax)
    _set_title(ax, amap.title)
    ax.figure.tight_layout()
    return ax.figure


def plot_parse(tokens: Sequence[str], heads: Sequence[int], title: str = "", ax=None) -> Figure:
    """Arcs above the words from each head to its modifier; ``tokens`` include the root at 0
    and ``heads[m]`` is the head of word ``m`` (``heads[0]`` is ignored). Words wider than
    their place are written upwards; on long sentences only every k-th word is written."""
    tokens = _shorten(tokens)
    width, points, step = _axis_fit(len(tokens), 0.45, MAX_SIZE[0] - 1, points=8.0)
    words_inches = _text_inches(tokens, points)
    upright = words_inches > width / max(len(tokens), 1)
    if ax is None:
        _, ax = plt.subplots(figsize=(1 + width, 2.6 + (words_inches if upright else 0)))
    for position in range(0, len(tokens), step):
        ax.text(position, 0, tokens[position], ha="center", va="top", fontsize=points,
                rotation=90 if upright else 0)
    longest = 0
    for modifier in range(1, len(tokens)):
        head = int(heads[modifier])
        middle, span = (head + modifier) / 2, abs(head - modifier)
        longest = max(longest, span)
        arc = matplotlib.patches.Arc((middle, 0.05), span, 0.35 * span + 0.2, theta1=0,
                                     theta2=180, color="tab:blue", lw=1)
        ax.add_patch(arc)
        ax.annotate("", xy=(modifier, 0.05), xytext=(modifier + 0.01 * (head - modifier), 0.15),
                    arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 1})
    ax.set_xlim(-1, len(tokens))
    ax.set_ylim(-0.5, 0.5 + 0.175 * longest)  # up to the top of the highest arc
    ax.axis("off")
    _set_title(ax, title)
    ax.figure.tight_layout()
    return ax.figure


#: A parse is drawn as a tree only when no head holds more than this share of its words. A
#: tree with (nearly) every word on one head, the root (when its arc scores saturate) or one
#: word, is flat: it shows which head wins everywhere, not a structure, and its arcs pile up.
FLAT_SHARE = 2 / 3


def busiest_head(heads: Sequence[int]) -> tuple[int, int]:
    """``(head, words)``: the head (0 = root) of the most words in ``heads`` (``heads[0]``, the
    root's slot, ignored) and how many; the first such head on ties, ``(0, 0)`` without
    words."""
    counts = Counter(int(head) for head in list(heads)[1:])
    return max(counts.items(), key=lambda item: (item[1], -item[0]), default=(0, 0))


def says_something(heads: Sequence[int]) -> bool:
    """Whether the tree ``heads`` (``heads[m]`` the head of word ``m``, ``heads[0]`` ignored)
    is worth drawing: no head holds more than :data:`FLAT_SHARE` of its words."""
    words = len(heads) - 1
    return words > 0 and busiest_head(heads)[1] <= FLAT_SHARE * words


def plot_latent_parse(parse: Parse, ax=None) -> Figure:
    """The argmax tree of ``parse`` when it :func:`says_something`; otherwise the soft parents
    p(head | word) as a heatmap (a row per word, a column per head, ``$`` = root) with each
    word's argmax head ringed, titled with why the tree is not drawn."""
    if says_something(parse.heads):
        return plot_parse(parse.tokens, parse.heads, parse.title, ax=ax)
    head, count = busiest_head(parse.heads)
    on = "the root" if head == 0 else repr(parse.tokens[head])
    title = (f"{parse.title} is flat ({count} of {len(parse.tokens) - 1} words on {on}): "
             "soft parents, argmax ringed")
    figure = plot_attention(AttentionMap(title, parse.parents, parse.tokens[1:], parse.tokens),
                            ax=ax)
    ax = figure.axes[0] if ax is None else ax
    cell_points = ax.get_window_extent().width * 72 / figure.dpi / len(parse.tokens)
    ax.plot([int(h) for h in list(parse.heads)[1:]], range(len(parse.tokens) - 1), "o",
            markersize=0.6 * cell_points, markerfacecolor="none", markeredgecolor="tab:red",
            scalex=False, scaley=False)
    return figure


def plot_raindrop(words: Sequence[str], attention: Tensor, title: str = "") -> Figure:
    """The easy-first "raindrop" plot (Martins & Kreutzer 2017, Figs. 2-4): the attention of
    every sketch step over the words (``attention [steps, words]``, a row per step, white =
    exactly zero) above the cumulative attention each word received; the figure grows with the
    sentence up to :data:`MAX_SIZE`."""
    words = _shorten(words)
    weights = attention.detach().float().cpu()[:, : len(words)]
    steps = weights.shape[0]
    width, points, word_step = _axis_fit(len(words), 0.35, MAX_SIZE[0] - 2)
    height, step_points, step_step = _axis_fit(steps, 0.22, MAX_SIZE[1] - 4)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(2 + width, min(MAX_SIZE[1], 2.2 + height + _text_inches(words, points))),
        sharex=True, gridspec_kw={"height_ratios": [max(steps, 1), 3]}, layout="constrained",
    )
    image = top.imshow(weights.numpy(), cmap=_zero_white_cmap(), vmin=1e-9, aspect="auto",
                       vmax=max(float(weights.max()), 1e-6))
    top.set_yticks(range(0, steps, step_step), [str(n + 1) for n in range(0, steps, step_step)],
                   fontsize=step_points)
    top.set_ylabel("sketch step", fontsize=8)
    _set_title(top, title or "attention per sketch step")
    _colorbar(image, [top, bottom])
    bottom.bar(range(len(words)), weights.sum(0).numpy(), color="tab:blue")
    bottom.axhline(1.0, color="gray", lw=0.8, ls="--")
    bottom.set_ylabel("cumulative", fontsize=8)
    bottom.tick_params(axis="y", labelsize=LABEL_POINTS)
    bottom.set_xticks(range(0, len(words), word_step), words[::word_step], rotation=90,
                      fontsize=points)
    return fig
