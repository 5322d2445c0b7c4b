"""The chain CRF's Triton kernels compile for a GPU (sm_90, as on an H100) on a machine without
one: Triton's own compiler and the ptxas it ships turn them into a cubin. Their results are
checked in Triton's interpreter by tests/test_linear_chain.py; compiling catches what the
interpreter lets through (a kernel may read only constexpr globals, every op must lower for its
dtype, float64 included)."""

from __future__ import annotations

import pytest

from lit_structattn.common.compiled import triton_installed
from tests.triton_compile import compiled_sizes


@pytest.mark.skipif(not triton_installed(), reason="triton is not installed")
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_the_triton_kernels_compile_for_a_gpu(dtype):
    real = "*" + dtype
    variants = [("forward_kernel", [real] * 2 + ["*i64"] + [real] * 3 + ["*fp64"] * 2,
                 {"BLOCK": 8}),
                ("covariance_kernel", [real] * 4 + ["*i64"] + [real] * 2 + ["*fp64"],
                 {"BLOCK": 8})]
    sizes = compiled_sizes("lit_structattn.structured._chain_triton_kernels", variants)
    assert [name for name, _ in sizes] == ["forward_kernel", "covariance_kernel"]
    assert all(size > 0 for _, size in sizes)
