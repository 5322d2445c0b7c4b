"""Compiling Triton kernels for a GPU (sm_90, as on an H100) on a machine without one: Triton's
own compiler and the ptxas it ships turn each kernel variant into a cubin. What the interpreter
(the kernels' correctness tests) lets through fails here: a kernel may read only constexpr
globals, and every op must lower for its dtype, float64 included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# argv: the kernels' module, then JSON [[kernel name, [pointer types], {constexprs}], ...];
# every argument neither a pointer nor a constexpr is an i64
COMPILE = """
import importlib
import json
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

kernels = importlib.import_module(sys.argv[1])
for name, pointers, constants in json.loads(sys.argv[2]):
    kernel = getattr(kernels, name)
    kinds = iter(pointers)
    signature = {arg: "constexpr" if arg in constants else next(kinds, "i64")
                 for arg in kernel.arg_names}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs=constants),
                              target=GPUTarget("cuda", 90, 32))
    print(name, len(compiled.asm["cubin"]))
"""


def compiled_sizes(module: str, variants: list[tuple[str, list[str], dict]]
                   ) -> list[tuple[str, int]]:
    """``(kernel name, cubin bytes)`` of every variant ``(kernel name, pointer types in
    argument order, constexpr values)`` of the kernels of ``module``, compiled for sm_90 in a
    fresh process (without ``TRITON_INTERPRET``); asserts that the compiler succeeded."""
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-c", COMPILE, module, json.dumps(variants)],
                         capture_output=True, text=True, env=environment, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return [(name, int(size)) for name, size in map(str.split, run.stdout.splitlines())]
