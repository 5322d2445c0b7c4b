"""The CRFs on a GPU give what they give on the CPU (marginals, gradients, argmax); the chain
CRF there runs its Triton kernels against numba's on the CPU. Skipped where torch sees no GPU (the
``cuda`` mark, tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from lit_structattn.common.compiled import triton_installed
from lit_structattn.structured import DependencyCRF, LinearChainCRF, _chain_kernel, _chain_triton


def _both(make, *tensors):
    """``make(*tensors)`` on the CPU and on CUDA, with the gradients of the first tensor."""
    results = []
    for device in ("cpu", "cuda"):
        leaves = [t.detach().to(device).requires_grad_() for t in tensors]
        marginals = make(*leaves)
        (marginals * torch.linspace(-1, 1, marginals.numel(), device=device)
         .view_as(marginals)).sum().backward()
        results.append((marginals.detach().cpu(), leaves[0].grad.cpu()))
    return results


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_chain_on_cuda_matches_cpu(dtype):
    generator = torch.Generator().manual_seed(0)
    unary = torch.randn(8, 20, 5, generator=generator, dtype=dtype) * 3
    transition = torch.randn(5, 5, generator=generator, dtype=dtype)
    lengths = torch.randint(1, 21, (8,), generator=generator)
    (cpu, cpu_grad), (gpu, gpu_grad) = _both(
        lambda u, t: LinearChainCRF(u, t, lengths.to(u.device)).marginals, unary, transition)
    tolerance = 1e-5 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(gpu, cpu, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(gpu_grad, cpu_grad, atol=tolerance, rtol=tolerance)
    best_cpu = LinearChainCRF(unary, transition, lengths).argmax
    best_gpu = LinearChainCRF(unary.cuda(), transition.cuda(), lengths.cuda()).argmax
    assert torch.equal(best_gpu.cpu(), best_cpu)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dependency_crf_on_cuda_matches_cpu(dtype):
    generator = torch.Generator().manual_seed(1)
    arcs = torch.randn(6, 13, 13, generator=generator, dtype=dtype) * 2
    lengths = torch.randint(1, 13, (6,), generator=generator)
    (cpu, cpu_grad), (gpu, gpu_grad) = _both(
        lambda a: DependencyCRF(a, lengths=lengths.to(a.device)).marginals, arcs)
    tolerance = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(gpu, cpu, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(gpu_grad, cpu_grad, atol=tolerance, rtol=tolerance)
    heads_cpu = DependencyCRF(arcs, lengths=lengths).argmax
    heads_gpu = DependencyCRF(arcs.cuda(), lengths=lengths.cuda()).argmax
    assert torch.equal(heads_gpu.cpu(), heads_cpu)


@pytest.mark.cuda
def test_the_chain_crf_runs_its_triton_kernels_on_cuda():
    scores = torch.zeros(1, 2, 2, device="cuda")
    expected = _chain_triton if triton_installed() else None
    assert _chain_kernel.backend_for(scores) is expected
