"""Matplotlib figures of attention: heatmaps and dependency parses (used by the TensorBoard
callback and the notebook)."""

from __future__ import annotations

import textwrap
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


def plot_figure(item: AttentionMap | Raindrop | tuple) -> Figure:
    """Draw one item of a task's ``attention_figures``: a heatmap, a raindrop plot, or a parse
    ``(tokens, heads, title)``."""
    if isinstance(item, AttentionMap):
        return plot_attention(item)
    if isinstance(item, Raindrop):
        return plot_raindrop(item.words, item.attention, item.title)
    return plot_parse(*item)


#: The largest figure drawn, ``(width, height)`` in inches: longer inputs get smaller cells
#: and labels instead.
MAX_SIZE = (14.0, 12.0)
LABEL_POINTS = 7.0  # tick labels at full size (smaller when the cells shrink)
TITLE_POINTS = 9.0
MIN_POINTS = 4.0
MAX_LABEL_CHARS = 40  # longer tick labels are shortened
TITLE_LINES = 2  # longer titles are shortened
CHAR_WIDTH = 0.6  # a character's width in ems (DejaVu Sans, generously)


def _zero_white_cmap():
    """Blues, with values below the colour range (exact zeros, as ``vmin`` is 1e-9) in white."""
    cmap = plt.get_cmap("Blues").copy()
    cmap.set_under("white")
    return cmap


def _shorten(labels: Sequence[str]) -> list[str]:
    """``labels`` as strings of at most :data:`MAX_LABEL_CHARS` characters (cut with "...")."""
    return [text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 3] + "..."
            for text in map(str, labels)]


def _text_inches(labels: Sequence[str], points: float) -> float:
    """About the width of the longest of ``labels`` at ``points``."""
    return max((len(text) for text in labels), default=0) * CHAR_WIDTH * points / 72


def _axis_fit(count: int, cell: float, room: float, points: float = LABEL_POINTS
              ) -> tuple[float, float]:
    """``(inches, font points)`` of an axis of ``count`` labelled cells of ``cell`` inches
    each, shrunk (cells and font alike, the font down to :data:`MIN_POINTS`) to fit ``room``
    inches."""
    inches = min(count * cell, room)
    scale = inches / (count * cell) if count else 1.0
    return inches, max(MIN_POINTS, points * scale)


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
    new figure grows with the map up to :data:`MAX_SIZE`."""
    weights = amap.weights.detach().float().cpu()[: len(amap.row_labels), : len(amap.col_labels)]
    row_labels, col_labels = _shorten(amap.row_labels), _shorten(amap.col_labels)
    rows, cols = len(row_labels), len(col_labels)
    width, col_points = _axis_fit(cols, 0.28, MAX_SIZE[0] - 4)
    height, row_points = _axis_fit(rows, 0.28, MAX_SIZE[1] - 3)
    if ax is None:
        _, ax = plt.subplots(figsize=(
            min(MAX_SIZE[0], 1.8 + _text_inches(row_labels, row_points) + width),
            min(MAX_SIZE[1], 1.4 + _text_inches(col_labels, col_points) + height)))
    image = ax.imshow(weights.numpy(), cmap=_zero_white_cmap(), vmin=1e-9,
                      vmax=max(float(weights.max()), 1e-6),
                      aspect="auto")
    ax.set_xticks(range(cols), col_labels, rotation=90, fontsize=col_points)
    ax.set_yticks(range(rows), row_labels, fontsize=row_points)
    for row in amap.highlight_rows:
        ax.get_yticklabels()[row].set_color("tab:red")
    _colorbar(image, ax)
    _set_title(ax, amap.title)
    ax.figure.tight_layout()
    return ax.figure


def plot_parse(tokens: Sequence[str], heads: Sequence[int], title: str = "", ax=None) -> Figure:
    """Arcs above the words from each head to its modifier; ``tokens`` include the root at 0
    and ``heads[m]`` is the head of word ``m`` (``heads[0]`` is ignored)."""
    tokens = _shorten(tokens)
    width, points = _axis_fit(len(tokens), 0.45, MAX_SIZE[0] - 1, points=8.0)
    if ax is None:
        _, ax = plt.subplots(figsize=(1 + width, 2.6))
    for position, token in enumerate(tokens):
        ax.text(position, 0, token, ha="center", va="top", fontsize=points)
    for modifier in range(1, len(tokens)):
        head = int(heads[modifier])
        middle, span = (head + modifier) / 2, abs(head - modifier)
        arc = matplotlib.patches.Arc((middle, 0.05), span, 0.35 * span + 0.2, theta1=0,
                                     theta2=180, color="tab:blue", lw=1)
        ax.add_patch(arc)
        ax.annotate("", xy=(modifier, 0.05), xytext=(modifier + 0.01 * (head - modifier), 0.15),
                    arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 1})
    ax.set_xlim(-1, len(tokens))
    ax.set_ylim(-0.5, 0.25 * len(tokens) + 0.5)
    ax.axis("off")
    _set_title(ax, title)
    ax.figure.tight_layout()
    return ax.figure


def plot_raindrop(words: Sequence[str], attention: Tensor, title: str = "") -> Figure:
    """The easy-first "raindrop" plot (Martins & Kreutzer 2017, Figs. 2-4): the attention of
    every sketch step over the words (``attention [steps, words]``, a row per step, white =
    exactly zero) above the cumulative attention each word received; the figure grows with the
    sentence up to :data:`MAX_SIZE`."""
    words = _shorten(words)
    weights = attention.detach().float().cpu()[:, : len(words)]
    steps = weights.shape[0]
    width, points = _axis_fit(len(words), 0.35, MAX_SIZE[0] - 2)
    height, step_points = _axis_fit(steps, 0.22, MAX_SIZE[1] - 4)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(2 + width, min(MAX_SIZE[1], 2.2 + height + _text_inches(words, points))),
        sharex=True, gridspec_kw={"height_ratios": [max(steps, 1), 3]}, layout="constrained",
    )
    image = top.imshow(weights.numpy(), cmap=_zero_white_cmap(), vmin=1e-9, aspect="auto",
                       vmax=max(float(weights.max()), 1e-6))
    top.set_yticks(range(steps), [str(n + 1) for n in range(steps)], fontsize=step_points)
    top.set_ylabel("sketch step", fontsize=8)
    _set_title(top, title or "attention per sketch step")
    _colorbar(image, [top, bottom])
    bottom.bar(range(len(words)), weights.sum(0).numpy(), color="tab:blue")
    bottom.axhline(1.0, color="gray", lw=0.8, ls="--")
    bottom.set_ylabel("cumulative", fontsize=8)
    bottom.tick_params(axis="y", labelsize=LABEL_POINTS)
    bottom.set_xticks(range(len(words)), words, rotation=90, fontsize=points)
    return fig
