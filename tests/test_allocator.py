"""The CLI's allocator setting: freed tensor memory is reused instead of faulted in again."""

import resource
import sys

import pytest
import torch

from lit_structattn.run.allocator import steady_allocator, steady_allocator_wanted


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt only")
def test_freed_tensor_memory_is_reused_without_page_faults():
    assert "no step pays page faults" in steady_allocator()
    torch.empty(16 << 20).fill_(1.0)  # 64 MiB allocated, touched and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(15 << 20).fill_(1.0)  # 60 MiB: fits in the freed block
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 1000  # glibc's default maps it afresh and faults in all 15361 pages


def test_only_cpu_runs_get_it_and_the_switch_turns_it_off(monkeypatch):
    monkeypatch.delenv("STRUCTATTN_STEADY_ALLOCATOR", raising=False)
    assert steady_allocator_wanted(on_cpu=True) and not steady_allocator_wanted(on_cpu=False)
    monkeypatch.setenv("STRUCTATTN_STEADY_ALLOCATOR", "0")
    assert not steady_allocator_wanted(on_cpu=True)
