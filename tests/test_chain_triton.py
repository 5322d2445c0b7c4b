"""The chain CRF's Triton kernels compile for a GPU (sm_90, as on an H100) on a machine without
one: Triton's own compiler and the ptxas it ships turn them into a cubin. Their results are
checked in Triton's interpreter by tests/test_linear_chain.py; compiling catches what the
interpreter lets through (a kernel may read only constexpr globals, every op must lower for its
dtype, float64 included)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lit_structattn.structured import _chain_triton

ROOT = Path(__file__).resolve().parent.parent

COMPILE = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from lit_structattn.structured import _chain_triton_kernels as kernels

real = sys.argv[1]
pointers = {"forward_kernel": ["*" + real] * 2 + ["*i64"] + ["*" + real] * 3 + ["*fp64"] * 2,
            "covariance_kernel": ["*" + real] * 4 + ["*i64"] + ["*" + real] * 2 + ["*fp64"]}
for name, types in pointers.items():
    kernel = getattr(kernels, name)
    names = kernel.arg_names
    signature = dict(zip(names, types + ["i64"] * (len(names) - len(types) - 1) + ["constexpr"]))
    compiled = triton.compile(ASTSource(kernel, signature, constexprs={"BLOCK": 8}),
                              target=GPUTarget("cuda", 90, 32))
    print(name, len(compiled.asm["cubin"]))
"""


@pytest.mark.skipif(not _chain_triton.installed(), reason="triton is not installed")
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_the_triton_kernels_compile_for_a_gpu(dtype):
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-c", COMPILE, dtype], capture_output=True, text=True,
                         env=environment, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    sizes = dict(line.split() for line in run.stdout.splitlines())
    assert set(sizes) == {"forward_kernel", "covariance_kernel"}
    assert all(int(size) > 0 for size in sizes.values())
