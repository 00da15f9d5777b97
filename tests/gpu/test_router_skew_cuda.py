"""Routing skew on CUDA: the skewed choice equals the CPU's for the same natural top-k (the hash and the systematic
sampler are exact integer / float64 arithmetic), and the fused grouped router path honours it too."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (run on the device: python3 -m pytest tests/gpu/test_router_skew_cuda.py)",
                allow_module_level=True)

from dwdp_trtllm.engine.router import SkewTable, select_experts, skew_select  # noqa: E402
from dwdp_trtllm.spec.models import get_model  # noqa: E402
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig, popularity_table  # noqa: E402


@pytest.mark.parametrize("T", [1, 37, 16384])
def test_skew_select_cuda_equals_cpu(T):
    spec = get_model("deepseek-v3")
    pop = popularity_table(RoutingSkewConfig(kind="power_law", alpha=1.2, seed=1), 3, spec.num_experts, spec.top_k)
    g = torch.Generator().manual_seed(T)
    logits = torch.randn(T, spec.num_experts, generator=g)
    ids = torch.stack([torch.randperm(spec.num_experts, generator=g)[:spec.top_k] for _ in range(T)])
    cpu = skew_select(spec, logits, ids, SkewTable(pop, spec.top_k, "cpu", seed=1), 2)
    gpu = skew_select(spec, logits.cuda(), ids.cuda(), SkewTable(pop, spec.top_k, "cuda", seed=1), 2)
    assert torch.equal(cpu[0], gpu[0].cpu())
    torch.testing.assert_close(cpu[1], gpu[1].cpu(), rtol=1e-6, atol=1e-6)


def test_fused_router_path_is_skewed():
    spec = get_model("deepseek-v3")
    pop = popularity_table(RoutingSkewConfig(kind="zipf", alpha=1.2), 1, spec.num_experts, spec.top_k)
    table = SkewTable(pop, spec.top_k, "cuda")
    logits = torch.randn(20000, spec.num_experts, device="cuda")
    ids, _ = select_experts(spec, logits, torch.zeros(spec.num_experts, device="cuda"), skew=table)
    share = torch.bincount(ids.reshape(-1), minlength=spec.num_experts).double().cpu() / ids.numel()
    assert (share - torch.from_numpy(pop[0])).abs().max() < 0.01
    assert (ids.sort(-1).values.diff(dim=-1) > 0).all()
