"""The README's API snippet runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_snippets_run():
    snippets = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(snippets) == 6
    out, namespace = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        for snippet in snippets:
            exec(compile(snippet, "README.md", "exec"), namespace)
    printed = out.getvalue()
    assert "torch.Size([2, 6, 3]) torch.Size([2, 5, 3, 3]) torch.Size([2, 6])" in printed
    assert re.search(r"tensor\(\[1\.0*, 1\.0*, 1\.0*, 1\.0*\]\)", printed)  # heads sum to 1
    assert "tensor([[0.7000, 0.3000, 0.0000]])" in printed
    assert "tensor([[0.5000, 0.5000, 0.0000]])" in printed
    assert "tensor([[0.6347, 0.3560, 0.0093]])" in printed  # entmax15
    assert "tensor([[0.5000, 0.4665, 0.0335]])" in printed  # centmax
    assert "torch.Size([2, 16]) torch.Size([2, 5])" in printed
    # in Transformers: our multi-head layer, then a Hugging Face model with bounded attention
    assert "torch.Size([2, 6, 16]) torch.Size([2, 4, 6, 6])\ntensor(True)\n" in printed
    assert "tensor(True)\n0.0\n" in printed
    # the raw-text example: a tree-transduction checkpoint read back by load_task
    assert "['attention', 'input', 'line', 'parents', 'prediction']\n9 10\n" in printed


def attention_matrix() -> str:
    """The README's family x attention table, from the registry."""
    from lit_structattn.layers.registry import FAMILIES

    columns = [(family, role) for family, roles in FAMILIES.items() for role in roles]
    names = list(dict.fromkeys(name for family, role in columns for name in FAMILIES[family][role]))
    header = ["name", *(f"{family} ({role})" if len(FAMILIES[family]) > 1 else family
                        for family, role in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in names:
        cells = ["x" if name in FAMILIES[family][role] else "" for family, role in columns]
        lines.append("| " + " | ".join([f"`{name}`", *cells]) + " |")
    return "\n".join(lines) + "\n"


def test_readme_shows_the_registry_matrix():
    assert attention_matrix() in README.read_text(), (
        "the README's attention matrix differs from layers/registry.py; paste:\n"
        + attention_matrix())
