"""The README's API snippet runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_snippet_runs():
    snippet = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "README.md", "exec"), {})
    printed = out.getvalue()
    assert "tensor([[0.7000, 0.3000, 0.0000]])" in printed
    assert "tensor([[0.5000, 0.5000, 0.0000]])" in printed
    assert "torch.Size([2, 16]) torch.Size([2, 5])" in printed
