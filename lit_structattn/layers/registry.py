"""The one registry of attention layers by name, and which names each model family takes.

:data:`KINDS` names every attention layer of the project and says what it is;
:data:`FAMILIES` says, for each model family and each of its attention roles, which of those
names it takes. Models type their constructor arguments with the ``Literal`` types below (so a
config parser lists the names in ``--help`` and refuses any other before building anything) and
check them with :func:`check_attention`; :func:`build_attention` builds the layers that a model
calls position by position (the :class:`~lit_structattn.layers.contract.AttentionLayer`
contract).
"""

from __future__ import annotations

from typing import Literal

from ..attention import TRANSFORMS
from ..common.checks import check_choice
from .attention import Attention
from .contract import AttentionLayer
from .segmentation import SegmentationAttention

TRANSFORM_NAMES = tuple(sorted(TRANSFORMS))  # centmax15, csoftmax, ..., softmax, sparsemax
POSITIONAL = ("uniform", "left_to_right", "right_to_left", "vanilla")
JOINT_OUTPUTS = ("soft", "full_joint", "beam_joint", "hard", "sample_joint")

#: Every attention layer name and what it is.
KINDS: dict[str, str] = {
    **{name: "transform over positions (lit_structattn.attention)" for name in TRANSFORM_NAMES},
    "softmax_penalty": "softmax with the easy-first coverage penalty (Martins & Kreutzer 2017)",
    "segmentation": "marginals of a 2-state linear-chain CRF (Kim et al. 2017, §3.2)",
    "unary_crf": "n-state chain over facts, independent steps (Kim et al. 2017, §4.3)",
    "binary_crf": "n-state chain over facts with pairwise potentials (Kim et al. 2017, §4.3)",
    **{name: "positional easy-first baseline (Martins & Kreutzer 2017)" for name in POSITIONAL},
    "none": "no attention",
    "simple": "softmax over the same scores as the structured layer (its unstructured twin)",
    "structured": "syntactic attention: the arc marginals of a projective dependency CRF "
                  "(Kim et al. 2017, §3.3)",
    "hard_parent": "the head of a frozen supervised parser's Eisner parse",
    "pretrained_structured": "syntactic attention started from a supervised parser",
    **{name: f"output: {name.replace('_', '-')} (Shankar et al. 2018)"
       for name in JOINT_OUTPUTS if name != "soft"},
    "soft": "output: the usual soft attention (context = expected value)",
}

#: Which names each model family takes, per attention role.
FAMILIES: dict[str, dict[str, tuple[str, ...]]] = {
    "easy_first": {"attention": (*TRANSFORM_NAMES, "softmax_penalty", *POSITIONAL)},
    "seq2seq": {
        "attention": (*TRANSFORM_NAMES, "segmentation"),
        "source_attention": ("none", "simple", "structured"),
        "output": JOINT_OUTPUTS,
    },
    "memory_network": {"attention": ("softmax", "sparsemax", "entmax15", "unary_crf",
                                     "binary_crf")},
    "nli": {
        "inter": TRANSFORM_NAMES,
        "intra": ("none", "simple", "structured", "hard_parent", "pretrained_structured"),
    },
    "classifier": {"attention": TRANSFORM_NAMES},
}

#: Layers that :func:`build_attention` builds besides the transforms.
STRUCTURED = {"segmentation": SegmentationAttention}

def names(family: str, role: str = "attention") -> tuple[str, ...]:
    """The names ``family`` takes for ``role``; ``ValueError`` listing the valid ones."""
    check_choice("model family", family, FAMILIES)
    return FAMILIES[family][check_choice(f"attention role of {family}", role, FAMILIES[family])]


def check_attention(family: str, role: str, name: str) -> str:
    """``name`` if ``family`` takes it for ``role``; ``ValueError`` listing the valid ones."""
    return check_choice(f"{family} {role}", name, names(family, role))


def attention_names() -> list[str]:
    """Every name :func:`build_attention` accepts (the decoder attentions of seq2seq)."""
    return sorted(names("seq2seq"))


def build_attention(name: str, query_dim: int, key_dim: int,
                    score: str = "general") -> AttentionLayer:
    """The attention layer called ``name`` (a transform behind a scorer, or segmentation);
    ``ValueError`` listing the valid names otherwise."""
    check_choice("attention", name, attention_names())
    if name in STRUCTURED:
        return STRUCTURED[name](query_dim, key_dim, score=score)
    return Attention(query_dim, key_dim, score=score, transform=name)


#: The names of each family and role, as types for constructor arguments.
AttentionName = Literal[tuple(attention_names())]
EasyFirstAttentionName = Literal[names("easy_first")]
SourceAttentionName = Literal[names("seq2seq", "source_attention")]
OutputName = Literal[names("seq2seq", "output")]
MemoryAttentionName = Literal[names("memory_network")]
InterAttentionName = Literal[names("nli", "inter")]
IntraAttentionName = Literal[names("nli", "intra")]
