"""Tree transduction (Kim et al. 2017, §4.1): rewrite a prefix formula in infix notation.

Example (depth 3)::

    ( * ( + ( + 15 7 ) 1 8 ) ( + 19 0 11 ) )  =>  ( ( 15 + 7 ) + 1 + 8 ) * ( 19 + 0 + 11 )

An *expression* is ``( op arg_1 ... arg_k )`` in prefix with ``op`` in ``{+, *}``, ``2 <= k <= 4``
and every argument a number in ``0 .. 20`` or a nested expression. The *depth* of a formula is its
maximum number of nested parentheses (an expression of numbers only has depth 1). In infix the
operator stands between every pair of arguments; the outermost expression loses its parentheses,
nested ones keep theirs.

Generator (exact depth ``d >= 1``, with ``nest_prob = p``, default ``0.3``). ``expression(d)``
draws, in this order and each uniformly: the operator from ``{+, *}``, the arity ``k`` from
``{2, 3, 4}``, and the index ``j`` of the *mandatory* argument from ``0 .. k-1``; then the
arguments left to right:

- if ``d == 1``: every argument is a number;
- argument ``j`` is ``expression(d - 1)`` (so at least one path reaches depth ``d``);
- any other argument is, with probability ``p``, ``expression(e)`` with ``e`` uniform in
  ``1 .. d-1`` (so it never exceeds the requested depth), and otherwise a number.

Numbers are uniform in ``0 .. 20``. Randomness comes from ``random.Random`` seeded with the
string ``"tree-transduction/{seed}/{split}/{depth}"``, so every (split, depth) bucket is
reproducible on its own and does not change when other buckets are resized.

Splits (the paper's sizes are the defaults): train ``train_per_depth = 5000`` formulas for each
depth in ``train_depths = (2, 4)`` (15K), test ``eval_per_depth = 200`` per depth in
``eval_depths = (2, 6)`` (1K), and a validation split of the same shape as the test split (200 per
depth 2-6; the paper does not describe one). Every formula is unique across all splits
(deduplicated on the prefix string): test is drawn first, then validation, then train, each
rejecting formulas already drawn. Depth ranges are inclusive.

Sources are the prefix tokens and targets the infix tokens, both over one shared vocabulary
(:func:`formula_vocabulary`). Sources carry **no** root symbol ``$``: the models prepend a
learned root vector themselves.

Bounded cost (:mod:`.limits`): a formula holds at most ``max_tokens`` prefix symbols
(default 400; the longest generated with the defaults, seeds 0-4, has 264), in the generated
splits (a longer one stops setup: lower ``eval_depths`` or raise the limit) and in the raw input
of a trained model (refused naming ``<source>:<line>``; a formula is never cut).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from lit_structattn.common.constants import BOS, BOS_ID, EOS, EOS_ID, PAD

from .batching import EncodedItems, seq2seq_batch
from .limits import LengthLimit
from .splits import SplitDataModule
from .vocabulary import SharedVocabularySizes, SymbolSourceCodec, Vocabulary

OPERATORS = ("+", "*")
MIN_ARITY, MAX_ARITY = 2, 4
MAX_NUMBER = 20
DEFAULT_NEST_PROB = 0.3
#: the default ``max_tokens`` (prefix symbols of a formula); see the module docstring
MAX_TOKENS = 400

Node = int | tuple[str, tuple["Node", ...]]  # a number, or (operator, arguments)
Expression = tuple[str, tuple[Node, ...]]


# ----------------------------------------------------------------------------- formulas


def random_expression(depth: int, rng: random.Random, nest_prob: float) -> Expression:
    """An expression of nesting depth exactly ``depth`` (>= 1), drawn as the module docstring says.

    Returns ``(operator, arguments)`` where each argument is an ``int`` or another expression.
    """
    op = OPERATORS[_uniform_int(rng, 0, len(OPERATORS) - 1)]
    arity = _uniform_int(rng, MIN_ARITY, MAX_ARITY)
    mandatory = _uniform_int(rng, 0, arity - 1)
    args = tuple(_random_argument(depth, i == mandatory, rng, nest_prob) for i in range(arity))
    return op, args


def _random_argument(depth: int, mandatory: bool, rng: random.Random, nest_prob: float) -> Node:
    if depth > 1 and mandatory:
        return random_expression(depth - 1, rng, nest_prob)
    if depth > 1 and rng.random() < nest_prob:
        return random_expression(_uniform_int(rng, 1, depth - 1), rng, nest_prob)
    return _uniform_int(rng, 0, MAX_NUMBER)


def _uniform_int(rng: random.Random, low: int, high: int) -> int:
    """Uniform in ``low .. high`` from one ``rng.random()`` draw (faster than ``randrange``)."""
    return low + int(rng.random() * (high - low + 1))


def expression_depth(node: Node) -> int:
    """Maximum number of nested parentheses in ``node`` (0 for a bare number)."""
    if isinstance(node, int):
        return 0
    return 1 + max(expression_depth(arg) for arg in node[1])


def prefix_tokens(node: Node) -> list[str]:
    """``node`` in prefix notation, e.g. ``['(', '+', '1', '2', ')']``."""
    if isinstance(node, int):
        return [str(node)]
    op, args = node
    tokens = ["(", op]
    for arg in args:
        tokens.extend(prefix_tokens(arg))
    tokens.append(")")
    return tokens


def infix_tokens(node: Node, outermost: bool = True) -> list[str]:
    """``node`` in infix notation; the outermost expression has no parentheses."""
    if isinstance(node, int):
        return [str(node)]
    op, args = node
    tokens = [] if outermost else ["("]
    for i, arg in enumerate(args):
        if i:
            tokens.append(op)
        tokens.extend(infix_tokens(arg, outermost=False))
    if not outermost:
        tokens.append(")")
    return tokens


def parse_prefix(tokens: Sequence[str]) -> Node:
    """Inverse of :func:`prefix_tokens`; raises ``ValueError`` on a malformed formula."""
    node, end = _parse_node(tokens, 0)
    if end != len(tokens):
        raise ValueError(f"trailing tokens after position {end}: {list(tokens[end:])}")
    return node


def _parse_node(tokens: Sequence[str], pos: int) -> tuple[Node, int]:
    if pos >= len(tokens):
        raise ValueError("formula ends too early")
    token = tokens[pos]
    if token.isdigit() and int(token) <= MAX_NUMBER:
        return int(token), pos + 1
    if token != "(" or pos + 1 >= len(tokens) or tokens[pos + 1] not in OPERATORS:
        raise ValueError(f"expected a number or '( op' at position {pos}, got {token!r}")
    op, pos, args = tokens[pos + 1], pos + 2, []
    while pos < len(tokens) and tokens[pos] != ")":
        arg, pos = _parse_node(tokens, pos)
        args.append(arg)
    if pos >= len(tokens):
        raise ValueError("unbalanced '(': missing ')'")
    if not MIN_ARITY <= len(args) <= MAX_ARITY:
        raise ValueError(f"an expression needs {MIN_ARITY}..{MAX_ARITY} arguments, got {len(args)}")
    return (op, tuple(args)), pos + 1


@dataclass(frozen=True)
class Formula:
    """One prefix -> infix pair: ``prefix`` (source tokens), ``infix`` (target tokens), depth."""

    prefix: tuple[str, ...]
    infix: tuple[str, ...]
    depth: int


def make_split(
    name: str,
    depths: Iterable[int],
    per_depth: int,
    seed: int,
    nest_prob: float,
    exclude: set[str],
) -> list[Formula]:
    """``per_depth`` new formulas of each depth, none of whose prefix string is in ``exclude``.

    ``exclude`` is updated in place with the drawn prefix strings, so chaining calls yields
    disjoint splits. Raises ``RuntimeError`` if unique formulas run out.
    """
    formulas = []
    for depth in depths:
        rng = random.Random(f"tree-transduction/{seed}/{name}/{depth}")
        found, attempts = 0, 0
        while found < per_depth:
            attempts += 1
            if attempts > 100 * per_depth + 1000:
                raise RuntimeError(f"could not draw {per_depth} unique depth-{depth} formulas")
            expression = random_expression(depth, rng, nest_prob)
            prefix = prefix_tokens(expression)
            key = " ".join(prefix)
            if key in exclude:
                continue
            exclude.add(key)
            formulas.append(Formula(tuple(prefix), tuple(infix_tokens(expression)), depth))
            found += 1
    return formulas


# ----------------------------------------------------------------------------- vocabulary


def formula_vocabulary() -> Vocabulary:
    """The shared source/target vocabulary: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, then
    ``(  )  +  *`` and the numbers ``0 .. 20`` (28 symbols); no ``<unk>``."""
    symbols = ["(", ")", *OPERATORS, *(str(n) for n in range(MAX_NUMBER + 1))]
    return Vocabulary(symbols, specials=(PAD, BOS, EOS))


class FormulaCodec(SymbolSourceCodec):
    """Raw formulas for a trained model (:class:`~lit_structattn.common.codec.TextCodec`)."""

    format = ("one prefix formula per line, symbols separated by spaces (brackets need none): "
              "( + 1 ( * 2 3 ) ) or (+ 1 (* 2 3))")
    max_tokens = MAX_TOKENS
    example_name = "formula"

    def symbols(self, line: str) -> list[str]:
        """The prefix symbols of ``line`` (brackets are symbols of their own: ``(+ 1 2)`` is
        ``( + 1 2 )``); ``ValueError`` unless it is a well-formed formula."""
        tokens = line.replace("(", " ( ").replace(")", " ) ").split()
        parse_prefix(tokens)
        return tokens


# ----------------------------------------------------------------------------- tensors


class TreeTransductionDataset(EncodedItems):
    """Encoded formulas. Item ``i`` is ``(prefix ids, infix ids, depth)`` (lists and an int);
    :func:`collate_formulas` turns a list of items into a batch of tensors.
    """

    def __init__(self, formulas: Sequence[Formula], vocab: Vocabulary) -> None:
        self.formulas = list(formulas)
        self.items = [(vocab.encode(f.prefix), vocab.encode(f.infix), f.depth) for f in formulas]


def collate_formulas(items: Sequence[tuple[list[int], list[int], int]]) -> dict[str, torch.Tensor]:
    """Pad dataset items into a batch of long tensors, trimmed to its own longest sequences.

    Returns ``src [B, S]``, ``src_lengths [B]``, ``tgt_in [B, T]`` (``<bos>`` + infix),
    ``tgt_out [B, T]`` (infix + ``<eos>``), ``tgt_lengths [B]`` (infix length + 1, counting
    ``<eos>``) and ``depth [B]``; padding is ``<pad>`` = 0.
    """
    src, tgt, depth = zip(*items, strict=True)
    return seq2seq_batch(src, tgt, BOS_ID, EOS_ID, depth=depth)


# ----------------------------------------------------------------------------- datamodule


class TreeTransductionDataModule(SharedVocabularySizes, SplitDataModule):
    """Prefix -> infix formulas of Kim et al. (2017), §4.1 (see the module docstring).

    Depth ranges are inclusive ``(low, high)`` pairs. Batches are dicts of long tensors:
    ``src [B, S]`` (prefix ids, 0-padded, no root symbol), ``src_lengths [B]``,
    ``tgt_in [B, T]`` (``<bos>`` + infix), ``tgt_out [B, T]`` (infix + ``<eos>``),
    ``tgt_lengths [B]`` (infix length + 1) and ``depth [B]``. The predict split is the test split.
    ``vocab`` (:func:`formula_vocabulary`) is available right after construction.
    ``max_tokens``: the most prefix symbols of a formula, generated or given to the trained model
    (see the module docstring). ``seed`` draws the formulas too; it and the other loader options
    (``**loader``: ``batch_size``, ...) are those of :class:`~.splits.SplitDataModule`.
    """

    def __init__(
        self,
        train_per_depth: int = 5000,
        train_depths: tuple[int, int] = (2, 4),
        eval_per_depth: int = 200,
        eval_depths: tuple[int, int] = (2, 6),
        nest_prob: float = DEFAULT_NEST_PROB,
        max_tokens: int = MAX_TOKENS,
        **loader,
    ) -> None:
        super().__init__(**loader)
        self.limit = LengthLimit(max_tokens, unit="symbols", truncatable=False)
        _check_positive("train_per_depth", train_per_depth)
        _check_positive("eval_per_depth", eval_per_depth)
        _check_depths("train_depths", train_depths)
        _check_depths("eval_depths", eval_depths)
        if not 0.0 <= nest_prob < 1.0:
            raise ValueError(f"nest_prob must be in [0, 1), got {nest_prob!r}")
        self.vocab = formula_vocabulary()
        self.datasets: dict[str, TreeTransductionDataset] = {}

    def setup(self, stage: str | None = None) -> None:
        """Generate all three splits (once; later calls are no-ops). ~15K formulas take < 1 s."""
        if self.datasets:
            return
        h = self.hparams
        seen: set[str] = set()
        eval_depths = range(h.eval_depths[0], h.eval_depths[1] + 1)
        train_depths = range(h.train_depths[0], h.train_depths[1] + 1)
        plan = [("test", eval_depths, h.eval_per_depth), ("val", eval_depths, h.eval_per_depth),
                ("train", train_depths, h.train_per_depth)]
        for name, depths, per_depth in plan:
            formulas = make_split(name, depths, per_depth, h.seed, h.nest_prob, seen)
            for number, formula in enumerate(formulas, start=1):
                try:
                    self.limit.cut((formula.prefix,), "formula")
                except ValueError as error:
                    raise ValueError(f"generated {name} formula {number} (depth "
                                     f"{formula.depth}): {error}, or lower the depths") from None
            self.datasets[name] = TreeTransductionDataset(formulas, self.vocab)

    collate = staticmethod(collate_formulas)  # batches of the length-bucketed loaders

    def text_codec(self) -> FormulaCodec:
        """What a trained model keeps to read raw formulas (its checkpoint saves it)."""
        return FormulaCodec(self.vocab, self.limit)


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _check_depths(name: str, depths: Sequence[int]) -> None:
    if (
        not isinstance(depths, (tuple, list))
        or len(depths) != 2
        or not all(isinstance(d, int) for d in depths)
        or not 1 <= depths[0] <= depths[1]
    ):
        raise ValueError(f"{name} must be an inclusive range (low, high) with 1 <= low <= high, "
                         f"got {depths!r}")
