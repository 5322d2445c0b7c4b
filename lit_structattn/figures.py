"""Matplotlib figures of attention: heatmaps and dependency parses (used by the TensorBoard
callback and the notebook)."""

from __future__ import annotations

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


def _zero_white_cmap():
    """Blues, with values below the colour range (exact zeros, as ``vmin`` is 1e-9) in white."""
    cmap = plt.get_cmap("Blues").copy()
    cmap.set_under("white")
    return cmap


def plot_attention(amap: AttentionMap, ax=None) -> Figure:
    """A heatmap of ``amap`` (white = exactly zero; a row per query, a column per position)."""
    weights = amap.weights.detach().float().cpu()[: len(amap.row_labels), : len(amap.col_labels)]
    if ax is None:
        rows, cols = weights.shape
        _, ax = plt.subplots(figsize=(1.5 + 0.28 * cols, 1.2 + 0.28 * rows))
    image = ax.imshow(weights.numpy(), cmap=_zero_white_cmap(), vmin=1e-9,
                      vmax=max(float(weights.max()), 1e-6),
                      aspect="auto")
    ax.set_xticks(range(len(amap.col_labels)), amap.col_labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(amap.row_labels)), amap.row_labels, fontsize=7)
    for row in amap.highlight_rows:
        ax.get_yticklabels()[row].set_color("tab:red")
    ax.set_title(amap.title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, fraction=0.03)
    ax.figure.tight_layout()
    return ax.figure


def plot_parse(tokens: Sequence[str], heads: Sequence[int], title: str = "", ax=None) -> Figure:
    """Arcs above the words from each head to its modifier; ``tokens`` include the root at 0
    and ``heads[m]`` is the head of word ``m`` (``heads[0]`` is ignored)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(1 + 0.45 * len(tokens), 2.6))
    for position, token in enumerate(tokens):
        ax.text(position, 0, token, ha="center", va="top", fontsize=8)
    for modifier in range(1, len(tokens)):
        head = int(heads[modifier])
        middle, width = (head + modifier) / 2, abs(head - modifier)
        arc = matplotlib.patches.Arc((middle, 0.05), width, 0.35 * width + 0.2, theta1=0,
                                     theta2=180, color="tab:blue", lw=1)
        ax.add_patch(arc)
        ax.annotate("", xy=(modifier, 0.05), xytext=(modifier + 0.01 * (head - modifier), 0.15),
                    arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 1})
    ax.set_xlim(-1, len(tokens))
    ax.set_ylim(-0.5, 0.25 * len(tokens) + 0.5)
    ax.axis("off")
    ax.set_title(title, fontsize=9)
    ax.figure.tight_layout()
    return ax.figure


def plot_raindrop(words: Sequence[str], attention: Tensor, title: str = "") -> Figure:
    """The easy-first "raindrop" plot (Martins & Kreutzer 2017, Figs. 2-4): the attention of
    every sketch step over the words (``attention [steps, words]``, a row per step, white =
    exactly zero) above the cumulative attention each word received."""
    weights = attention.detach().float().cpu()[:, : len(words)]
    steps = weights.shape[0]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(1.5 + 0.35 * len(words), 1.6 + 0.22 * steps), sharex=True,
        gridspec_kw={"height_ratios": [max(steps, 1), 3]}, layout="constrained",
    )
    image = top.imshow(weights.numpy(), cmap=_zero_white_cmap(), vmin=1e-9, aspect="auto",
                       vmax=max(float(weights.max()), 1e-6))
    top.set_yticks(range(steps), [str(n + 1) for n in range(steps)], fontsize=7)
    top.set_ylabel("sketch step", fontsize=8)
    top.set_title(title or "attention per sketch step", fontsize=9)
    fig.colorbar(image, ax=[top, bottom], fraction=0.03)
    bottom.bar(range(len(words)), weights.sum(0).numpy(), color="tab:blue")
    bottom.axhline(1.0, color="gray", lw=0.8, ls="--")
    bottom.set_ylabel("cumulative", fontsize=8)
    bottom.set_xticks(range(len(words)), list(words), rotation=90, fontsize=7)
    return fig
