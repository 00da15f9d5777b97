"""The DWDP layer's steady-state compute has no host sync and no device allocation: it captures in a CUDA graph.

DwdpExperts.forward between acquire() and release() (sort by expert, gather, grouped GEMM over
[local buffer, prefetch slot], combine) is captured with torch.cuda.graph and replayed on new inputs;
capture fails on any host sync (cudaErrorStreamCaptureUnsupported), so a replay that matches eager
proves the contract. The prefetcher is a stub here: its event waits belong to the copy pipeline,
which a captured forward would fork into the graph (not done yet, see docs/ARCHITECTURE.md).
Eager steady-state calls must also leave torch's count of cudaMalloc'd segments unchanged.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]

from dwdp_trtllm.engine.dwdp import DwdpExperts  # noqa: E402
from dwdp_trtllm.core.runtime import ExpertSources  # noqa: E402
from dwdp_trtllm.ops.reference import quantize_fp8_blockwise  # noqa: E402

E, H, I, K, T = 8, 256, 256, 2, 96
LOCAL = [5, 0, 3]  # this rank's experts (any order); the rest come from the slot
FETCHED = [e for e in range(E) if e not in LOCAL][::-1]


class _StubPrefetcher:
    def acquire(self, moe_idx: int) -> int:
        return 0

    def release(self, moe_idx: int) -> None:
        pass


def _layer(gemm: str, fp8: bool, split: bool = True) -> DwdpExperts:
    """DWDP layer over [local buffer, slot] (split) or over one expert-ordered buffer (the independent reference)."""
    g = torch.Generator(device="cuda").manual_seed(11)
    dev = torch.device("cuda")
    w13 = torch.randn(E, 2 * I, H, generator=g, device=dev) / H ** 0.5
    w2 = torch.randn(E, H, I, generator=g, device=dev) / I ** 0.5
    per = {"w13": w13, "w2": w2}
    buffers: dict[str, list[torch.Tensor]] = {}
    for name, w in per.items():
        parts = [w[LOCAL], w[FETCHED]] if split else [w]
        if fp8:
            qs = [quantize_fp8_blockwise(p, (128, 128)) for p in parts]
            buffers[name] = [q for q, _ in qs]
            buffers[name + "_scale"] = [s for _, s in qs]
        else:
            buffers[name] = [p.to(torch.bfloat16).contiguous() for p in parts]
    if split:
        buf_idx = torch.tensor([0 if e in LOCAL else 1 for e in range(E)], dtype=torch.int32, device=dev)
        row = torch.tensor([LOCAL.index(e) if e in LOCAL else FETCHED.index(e) for e in range(E)], dtype=torch.int32, device=dev)
    else:
        buf_idx, row = torch.zeros(E, dtype=torch.int32, device=dev), torch.arange(E, dtype=torch.int32, device=dev)
    sources = ExpertSources(buffers, buf_idx, row)
    rt = SimpleNamespace(spec=SimpleNamespace(num_experts=E), cfg=SimpleNamespace(weight_dtype="fp8" if fp8 else "bf16"),
                         device=dev, composite=None, local_ids=LOCAL,
                         prefetcher=_StubPrefetcher(), expert_sources=lambda moe_idx, slot: sources)
    return DwdpExperts(rt, gemm=gemm)


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, generator=g, device="cuda").to(torch.bfloat16)
    # experts 1 and 6 get no tokens on purpose (empty groups in the graph)
    choices = torch.tensor([0, 2, 3, 4, 5, 7], device="cuda")
    ids = choices[torch.stack([torch.randperm(6, generator=g, device="cuda")[:K] for _ in range(T)])]
    w = torch.softmax(torch.randn(T, K, generator=g, device="cuda"), -1)
    return x, ids, w


@pytest.mark.parametrize("gemm,fp8", [("merge", False), ("multi_buffer", False), ("multi_buffer", True)])
def test_dwdp_layer_forward_captures_in_a_cuda_graph(gemm, fp8):
    layer = _layer(gemm, fp8)
    x, ids, w = _inputs(1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream (torch.cuda.graph's recipe)
        for _ in range(2):
            layer.forward(0, x, ids, w)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    # steady state, eager: no host sync (error mode raises), no new cudaMalloc'd segment
    segments = torch.cuda.memory_stats()["segment.all.allocated"]
    torch.cuda.set_sync_debug_mode("error")
    try:
        eager = layer.forward(0, x, ids, w)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["segment.all.allocated"] == segments, "steady-state forward called cudaMalloc"

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # raises on a host sync inside the layer
        static_out = layer.forward(0, x, ids, w)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, eager)

    x2, ids2, w2 = _inputs(2)  # new routing and activations through the same graph
    x.copy_(x2), ids.copy_(ids2), w.copy_(w2)
    graph.replay()
    torch.cuda.synchronize()
    want = layer.forward(0, x, ids, w)
    assert not torch.equal(want, eager)  # the new inputs change the answer
    assert torch.equal(static_out, want), f"graph replay differs from eager ({gemm}, fp8={fp8})"
    # and eager DWDP is right: the same experts from one expert-ordered buffer through the reference loop
    ref_layer = _layer("reference", fp8, split=False)
    ref = ref_layer.forward(0, x, ids, w)
    rel = ((want.float() - ref.float()).norm() / ref.float().norm()).item()
    # fp8: multi_buffer also quantises the activations to e4m3 (1x128 groups), two GEMMs deep; the op alone
    # is held to 0.1 against unquantised inputs (test_grouped_gemm_cuda.py); measured 4.3e-2 here on 2026-12-02
    tol = 0.1 if fp8 and gemm == "multi_buffer" else 2e-2
    assert rel <= tol, f"{gemm} fp8={fp8}: relative error {rel:.3e} against the reference loop (tolerance {tol})"
