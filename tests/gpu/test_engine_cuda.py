"""DWDP and DEP against the single-process reference on CUDA (bf16), 2-4 ranks sharing the GPU(s).

Run on the device (scripts/gpu_check.sh). BF16 tolerance: DEP and DWDP batch the expert GEMMs
differently from the reference (different M per expert -> different cuBLAS kernels), so results
differ by bf16 rounding that accumulates over the layers; relative error <= 2e-2 per request.
"""
from __future__ import annotations

import pytest
import torch

from dwdp_trtllm.config import load_bench_points
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
