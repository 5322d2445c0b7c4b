"""The README's API snippet runs and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_snippets_run():
    snippets = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(snippets) == 2
    out, namespace = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        for snippet in snippets:
            exec(compile(snippet, "README.md", "exec"), namespace)
    printed = out.getvalue()
    assert "torch.Size([2, 6, 3]) torch.Size([2, 5, 3, 3]) torch.Size([2, 6])" in printed
    assert re.search(r"tensor\(\[1\.0*, 1\.0*, 1\.0*, 1\.0*\]\)", printed)  # heads sum to 1
    assert "tensor([[0.7000, 0.3000, 0.0000]])" in printed
    assert "tensor([[0.5000, 0.5000, 0.0000]])" in printed
    assert "torch.Size([2, 16]) torch.Size([2, 5])" in printed
