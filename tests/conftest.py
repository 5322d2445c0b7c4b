"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["compiled", "torch"])
def solver(request, monkeypatch):
    """Run the test once with the compiled CPU solvers of csoftmax/csparsemax (numba) and once
    with the torch solvers (those of every other device)."""
    from lit_structattn.attention import _compiled

    if request.param == "compiled":
        if not _compiled.available():
            pytest.skip("numba is not installed or STRUCTATTN_COMPILED=0")
    else:
        monkeypatch.setattr(_compiled, "usable", lambda z: False)
    return request.param
