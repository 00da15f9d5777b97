"""CUDA VMM composite view: separate physical allocations seen as one [E, N, K] tensor, read by torch._grouped_mm."""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from dwdp_trtllm.ops import grouped_gemm_reference, merge_experts  # noqa: E402
from dwdp_trtllm.core.composite_view import CompositeView, VmmAllocation, granularity  # noqa: E402


def test_view_aliases_the_allocations_and_feeds_grouped_mm():
    gran = granularity(torch.cuda.current_device())
    N, K = 512, 2048  # one expert = 2 MiB in bf16
    per = N * K * 2
    assert per % gran == 0
    local = VmmAllocation.create(3 * per, 0)  # the rank's own 3 experts, one allocation
    slot = [VmmAllocation.create(per, 0) for _ in range(5)]  # prefetch slot: one allocation per expert
    wl = local.tensor((3, N, K), torch.bfloat16)
    ws = [s.tensor((1, N, K), torch.bfloat16) for s in slot]
    wl.copy_(torch.randn(3, N, K, device="cuda"))
    for w in ws:
        w.copy_(torch.randn(1, N, K, device="cuda"))
    # experts 0..2 local, 3..6 = slot experts 1..4 (slot expert 0 left out: any subset maps)
    view = CompositeView([(local, 0, 3 * per)] + [(s, 0, per) for s in slot[1:]])
    w_ENK = view.tensor((7, N, K), torch.bfloat16)
    buffers = [wl] + ws
    bidx = torch.tensor([0, 0, 0, 2, 3, 4, 5], dtype=torch.int32, device="cuda")
    rows = torch.tensor([0, 1, 2, 0, 0, 0, 0], dtype=torch.int32, device="cuda")
    assert torch.equal(w_ENK, merge_experts(buffers, bidx.cpu(), rows.cpu()))
    ws[2].fill_(1.5)  # writes through one mapping are seen through the other (no copy)
    torch.cuda.synchronize()
    assert torch.equal(w_ENK[4], ws[2][0])
    ws[2].copy_(torch.randn(1, N, K, device="cuda"))
    counts = [0, 1, 130, 7, 64, 3, 200]
    a = torch.randn(sum(counts), K, device="cuda").to(torch.bfloat16)
    offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    out = torch._grouped_mm(a, w_ENK.transpose(-2, -1), offs=offs)
    ref = grouped_gemm_reference(a, offs, buffers, bidx, rows, dtype=torch.float64)
    assert ((out.double() - ref).norm() / ref.norm()).item() <= 1e-2
    torch.cuda.synchronize()
    view.close()
    for s in [local, *slot]:
        s.close()


def test_view_refuses_sizes_off_granularity_and_partial_allocations():
    gran = granularity(0)
    alloc = VmmAllocation.create(4 * gran, 0)
    try:
        with pytest.raises(ValueError, match=f"granularity {gran} bytes"):
            CompositeView([(alloc, 0, gran + 4096)])
        with pytest.raises(ValueError, match="whole allocations only"):
            CompositeView([(alloc, gran, 2 * gran)])
    finally:
        alloc.close()
