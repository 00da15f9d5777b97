"""DWDP and DEP against the single-process reference on CUDA (bf16), 2-4 ranks sharing the GPU(s).

Run on the device (scripts/gpu_check.sh). BF16 tolerance: DEP and DWDP batch the expert GEMMs
differently from the reference (different M per expert -> different cuBLAS kernels), so results
differ by bf16 rounding that accumulates over the layers; relative error <= 2e-2 per request.
"""
from __future__ import annotations

import pytest
import torch

from dwdp_trtllm.spec.config import load_bench_points
from dwdp_trtllm.engine.launcher import run_modes
from dwdp_trtllm.engine.records import Request

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]

REL_TOL_BF16 = 2e-2


def _cfg(ranks: int, dwdp: dict, model: str = "tiny"):
    model = dwdp.pop("_model", model)
    data = {"model": {"preset": model, "dtype": "bf16"},
            "dwdp": {"weight_dtype": "bf16", **dwdp},
            "workload": {"max_num_tokens": 256},
            "run": {"device": "cuda", "ranks": ranks, "warmup_iters": 1, "timeout_s": 300}}
    return load_bench_points(data)[1][0]


def _requests(ranks: int, per_rank: int) -> list[list[Request]]:
    g = torch.Generator().manual_seed(7)
    return [[Request(request_id=r * 1000 + i, rank=r, isl=int(torch.randint(5, 300, (1,), generator=g)), arrival_s=0.0)
             for i in range(per_rank)] for r in range(ranks)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("ranks,dwdp", [
    (3, {"dwdp_size": 3, "redundant_experts": 2, "transport": "ipc", "gemm": "multi_buffer", "slice_bytes": 4096}),
    (4, {"dwdp_size": 2, "num_groups": 2, "transport": "vmm_fd", "gemm": "merge", "contention_opt": False,
         "pacing": "after_attention"}),
    # local experts (vmm_fd allocations) and slot runs mapped into one [E, ...] range: torch._grouped_mm, no merge
    (2, {"dwdp_size": 2, "transport": "vmm_fd", "gemm": "composite_view", "_model": "tiny-vmm"}),
])
def test_cuda_equivalence(ranks, dwdp, monkeypatch):
    monkeypatch.setenv("DWDP_CHECK_SYNC", "1")  # ranks count host syncs inside the DWDP layer
    dwdp = dict(dwdp)
    cfg = _cfg(ranks, dwdp)
    reqs = _requests(ranks, 3)
    out = run_modes(cfg, ["reference", "dep", "dwdp"], reqs, collect_outputs=True)
    ref = {rid: h for res in out["reference"] for rid, h in res.extra["hidden"].items()}
    for mode in ("dep", "dwdp"):
        got = {rid: h for res in out[mode] for rid, h in res.extra["hidden"].items()}
        assert sorted(got) == sorted(ref)
        worst = max(((got[k] - ref[k]).norm() / ref[k].norm()).item() for k in ref)
        print(f"ranks={ranks} {dwdp} {mode}: max relative error {worst:.3e}")
        assert worst <= REL_TOL_BF16, f"{mode}: {worst}"
    assert out["dep"][0].extra["dep_a2a"] in ("cuda-ipc", "nccl")
    assert all(r.copy_bytes > 0 for r in out["dwdp"])
    if dwdp["gemm"] != "reference":  # the reference GEMM loop reads offsets on the host by design
        syncs = [r.extra["host_syncs_in_dwdp_layer"] for r in out["dwdp"]]
        print(f"host syncs inside the DWDP layer per rank (first iteration = warm-up): {syncs}")
        print("sync sites:", sorted({site for r in out["dwdp"] for site in r.extra["host_sync_sites"]}))
        # steady state is the contract (CUDA-graph capture of later iterations); the warm-up's "1 per rank"
        # seen on 2026-12-02 was torch's one-time prototype notice, no longer counted (is_sync_warning)
        assert [s["steady"] for s in syncs] == [0] * ranks


def _attention_reference(q_LNd, k_SNd, v_SNe, prefix, scale):
    """float64 causal attention of L queries at positions prefix.. over S = prefix + L keys: out_LNe."""
    L, S = q_LNd.shape[0], k_SNd.shape[0]
    s = torch.einsum("lnd,snd->nls", q_LNd.double(), k_SNd.double()) * scale
    mask = torch.arange(S, device=q_LNd.device)[None, :] <= (prefix + torch.arange(L, device=q_LNd.device))[:, None]
    return torch.einsum("nls,sne->lne", s.masked_fill(~mask, float("-inf")).softmax(-1), v_SNe.double())


@pytest.mark.parametrize("L,prefix", [(300, 400), (1, 255), (257, 1000), (3072, 5120)])
def test_chunk_over_its_prefix_both_ways_on_cudnn(L, prefix):
    """A chunk with a cached prefix: one causal cuDNN call over prefix + chunk with the prefix rows as dummy queries
    (causal_over_prefix) and the split way (causal chunk + flash over the prefix + lse merge, attend_bucketed), on
    views of buffers with spare rows as MLA's layer passes them, against float64 attention; MLA head dims."""
    from dwdp_trtllm.engine.attention_cuda import (BUCKET, attend_bucketed, causal_over_prefix,
                                                   cudnn_attention_usable)
    if not cudnn_attention_usable(0):
        pytest.skip("cuDNN SDPA unusable on this GPU")
    g = torch.Generator(device="cuda").manual_seed(L + prefix)
    N, d, e = 8, 192, 128
    S = prefix + L
    q_all = torch.randn(S + BUCKET, N, d, device="cuda", dtype=torch.bfloat16, generator=g)  # [dummy | chunk | spare]
    k = torch.randn(S + BUCKET, N, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(S + BUCKET, N, e, device="cuda", dtype=torch.bfloat16, generator=g)
    want = _attention_reference(q_all[prefix:S], k[:S], v[:S], prefix, d ** -0.5)
    front = causal_over_prefix(q_all, k, v, L, prefix, d ** -0.5)
    split = attend_bucketed(q_all[prefix:], k, v, L, prefix, d ** -0.5)
    for name, out in (("front", front), ("split", split)):
        assert out.shape == (L, N, e) and out.dtype == torch.bfloat16
        err = ((out.double() - want).norm() / want.norm()).item()
        print(f"chunk of {L} over a prefix of {prefix}, {name}: rel error vs float64 {err:.2e}, "
              f"contiguous {out.is_contiguous()}")  # contiguous: o_proj's input needs no copy
        assert err < 2e-2, err


@pytest.mark.parametrize("front", [False, True])
def test_mla_layer_chunked_prefill_either_way_matches_cpu_float32(monkeypatch, front):
    """One MLA layer with a chunk continuing a cached request, its prefix attended either way (forced), against the
    CPU float32 path on the same weights (attention only: no routing can flip)."""
    import dataclasses

    from dwdp_trtllm.engine import layers
    from dwdp_trtllm.engine.records import Segment
    from dwdp_trtllm.spec.models import get_model
    from test_fused_cuda import mla_outputs_cpu_and_cuda  # tests/gpu is on sys.path

    spec = dataclasses.replace(get_model("tiny"), qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)
    g = torch.Generator().manual_seed(5)
    x1, x2 = torch.randn(500, spec.hidden_size, generator=g), torch.randn(433, spec.hidden_size, generator=g)
    # batch 2: request 1's last 333 tokens after 450 cached (at packed row 0), then a whole request of 100
    batches = [(x1, [Segment(0, 0, 50, True), Segment(1, 0, 450, False)]),
               (x2, [Segment(1, 450, 333, True), Segment(2, 0, 100, True)])]
    chosen = []

    def rule(L, P, d, e, dev=0):
        chosen.append(P > 0 and front)
        return P > 0 and front
    monkeypatch.setattr(layers, "prefix_as_causal", rule)
    out = mla_outputs_cpu_and_cuda(spec, batches)
    assert any(chosen) == front
    for got, want in zip(out["cuda"], out["cpu"]):
        assert torch.isfinite(got).all()
        assert ((got - want).norm() / want.norm()).item() < 2e-2
