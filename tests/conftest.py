"""Fixtures shared by the test modules."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

# Without a GPU, Triton kernels can only run on CPU tensors, in Triton's interpreter; it must be
# chosen before Triton is first imported (Lightning imports it).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

# `make test` runs the suite in TEST_WORKERS pytest-xdist workers (2, the CI machine's cores): each
# worker, and every process its tests start, computes on one thread (workers of several threads
# each oversubscribe the cores).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked ``cuda`` on a machine where torch sees no GPU (CI has none)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def force_solver(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make csoftmax/csparsemax use the compiled CPU solvers (``compiled``, numba; the test is
    skipped where numba is missing) or the torch solvers (``torch``, those of every other
    device) for the rest of the test."""
    from lit_structattn.attention import _compiled

    if kind == "compiled":
        if not _compiled.available():
            pytest.skip("numba is not installed or STRUCTATTN_COMPILED=0")
    else:
        monkeypatch.setattr(_compiled, "usable", lambda z: False)


def force_triton(kernels, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the transforms served by the Triton kernel modules ``kernels`` (each with a
    ``usable(z)``) run them for the rest of the test, on CPU tensors in Triton's interpreter;
    skipped where Triton is missing, or where a GPU turned the interpreter off (the ``cuda``
    tests run the kernels there)."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton's interpreter is off (there is a GPU)")
    for module in kernels:
        monkeypatch.setattr(module, "usable", lambda z: True)


def count_fallbacks(kernels, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """For the rest of the test, the list of the row counts that the Triton kernel module
    ``kernels`` (a ``forward(z, u, valid, exact, name, **options)`` that hands the rows it did
    not certify to ``exact``) hands to its exact fallback, call after call."""
    handed: list[int] = []
    forward = kernels.forward

    def counting(z, u, valid, exact, name, **options):
        def fallback(*rows):
            handed.append(rows[0].shape[0])
            return exact(*rows)

        return forward(z, u, valid, fallback, name, **options)

    monkeypatch.setattr(kernels, "forward", counting)
    return handed


@pytest.fixture(params=["compiled", "torch"])
def solver(request, monkeypatch):
    """Run the test once with the compiled CPU solvers of csoftmax/csparsemax (numba) and once
    with the torch solvers (those of every other device)."""
    force_solver(request.param, monkeypatch)
    return request.param


@pytest.fixture
def no_host_checks(monkeypatch):
    """run_transform's host checks of the inputs (``screen_non_finite``, ``check_feasible``: a
    synchronization each) fail the test if they run: the kernel path must apply the rules.
    Returns the failing stand-in, for other checks a test forbids."""
    from lit_structattn.attention import _checks

    def unexpected(*args):
        raise AssertionError("a host check ran")

    monkeypatch.setattr(_checks, "screen_non_finite", unexpected)
    monkeypatch.setattr(_checks, "check_feasible", unexpected)
    return unexpected

