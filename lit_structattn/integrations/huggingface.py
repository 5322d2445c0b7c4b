"""Our transforms as Hugging Face ``transformers`` attention implementations.

The problem: a Hugging Face model computes attention through a function it looks up by
``config._attn_implementation`` in ``transformers.AttentionInterface``, called as
``function(module, query [B, H, T, D], key [B, Hkv, S, D], value [B, Hkv, S, Dv],
attention_mask, scaling=None, dropout=0.0, **kwargs) -> (out [B, T, H, Dv], weights
[B, H, T, S])``. :func:`register` adds one such function per transform of
:mod:`lit_structattn.attention`, under the transform's name, so that
``AutoModel.from_config(config, attn_implementation="entmax15")`` (or ``"centmax15"``, ...)
builds a model whose every attention layer uses it.

The method: :func:`lit_structattn.layers.multihead.dot_product_attention`, with T5's
``position_bias`` added to the scores and shared key/value heads repeated. A constrained
transform (``csparsemax``, ``centmax15``, ``csoftmax``) gives bounded attention (each key's
total attention across the queries of a call capped,
:func:`~lit_structattn.layers.multihead.bounded_attention`), the cap read from the attention
module's ``attention_cap`` attribute, else from its config's ``attention_cap``
(``config.attention_cap = 2.0``), else from :func:`register`'s ``cap``. A call is one forward
pass: when generating with a key/value cache each new token is a call of its own, so the cap
bounds the attention within a pass, not across generation steps.

The contract: weights are returned before dropout (so that they obey their transform) and are
exactly 0 at keys a query may not attend. Masks: :func:`register` also gives each name the mask
Hugging Face builds for ``sdpa`` (bool, True = may attend), always built in full, since these
functions read no ``is_causal`` flag; a float mask passed in its place is added to the scores,
its lowest-value entries marking keys that may not be attended. ``softcap`` and attention sinks
(``s_aux``) are refused.

``transformers`` is imported only by :func:`register`: the package works without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from torch import Tensor, nn

from ..attention import TRANSFORMS, get_transform
from ..common.optional import optional_import
from ..layers.multihead import dot_product_attention, split_mask

#: the type of a Hugging Face attention function (see the module docstring)
AttentionFunction = Callable[..., tuple[Tensor, Tensor]]


def attention_function(name: str, cap: float | None = None, **options: float
                       ) -> AttentionFunction:
    """The Hugging Face attention function of the transform ``name`` with its ``options``
    (``alpha=1.3`` for ``entmax``); ``cap`` is the default cap of a constrained transform
    (module docstring)."""
    transform = get_transform(name, **options)

    def attention(
        module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
        attention_mask: Tensor | None, scaling: float | None = None, dropout: float = 0.0,
        position_bias: Tensor | None = None, softcap: float | None = None,
        s_aux: Tensor | None = None, **kwargs: object,
    ) -> tuple[Tensor, Tensor]:
        if softcap is not None or s_aux is not None:
            raise ValueError(f"the {name} attention takes no softcap and no attention sinks")
        key, value = (shared_heads(x, query.shape[1]) for x in (key, value))
        allowed, bias = split_mask(attention_mask)
        if position_bias is not None:
            bias = position_bias if bias is None else bias + position_bias
        layer_cap = module_cap(module, cap) if transform.constrained else None
        out, weights = dot_product_attention(
            query, key, value, transform, allowed, bias, layer_cap, scaling,
            dropout if module.training else 0.0)
        return out.transpose(1, 2).contiguous(), weights

    attention.__name__ = attention.__qualname__ = f"{name}_attention"
    return attention


def shared_heads(x: Tensor, heads: int) -> Tensor:
    """Keys or values ``[B, Hkv, S, D]`` shared by groups of query heads, repeated to ``[B,
    heads, S, D]`` (grouped-query attention; unchanged when ``Hkv = heads``)."""
    return x.repeat_interleave(heads // x.shape[1], dim=1) if x.shape[1] != heads else x


def module_cap(module: nn.Module, default: float | None) -> float:
    """The cap of a bounded attention layer: ``module.attention_cap``, else
    ``module.config.attention_cap``, else ``default``.

    Raises:
        ValueError: none of them is set.
    """
    for owner in (module, getattr(module, "config", None)):
        cap = getattr(owner, "attention_cap", None)
        if cap is not None:
            return cap
    if default is None:
        raise ValueError("bounded attention needs a cap: set config.attention_cap (or the "
                         "attention module's attention_cap, or register(cap=...))")
    return default


def full_boolean_mask(*args: object, **kwargs: object) -> Tensor | None:
    """Hugging Face's ``sdpa`` mask (bool, True = may attend) never left out for a causal
    layer: these attention functions read no ``is_causal`` flag."""
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **{**kwargs, "allow_is_causal_skip": False})


def register(names: Iterable[str] | None = None, cap: float | None = None,
             **options: float) -> list[str]:
    """Register the transforms ``names`` (default: every one of
    :data:`~lit_structattn.attention.TRANSFORMS`) as Hugging Face attention implementations of
    the same names, with their masks; ``cap`` is the default cap of the constrained ones, and
    ``options`` are given to every one of them (``register(["entmax"], alpha=1.3)``).

    Returns:
        the registered names.
    Raises:
        ImportError: ``transformers`` is missing (it comes with the ``transformers`` extra).
        ValueError: an unknown transform name, or an option one of them does not take.
    """
    transformers = optional_import("transformers", "transformers")
    masking = optional_import("transformers.masking_utils", "transformers")
    names = sorted(TRANSFORMS) if names is None else [get_transform(n).name for n in names]
    for name in names:
        transformers.AttentionInterface.register(name, attention_function(name, cap, **options))
        masking.AttentionMaskInterface.register(name, full_boolean_mask)
    return names
