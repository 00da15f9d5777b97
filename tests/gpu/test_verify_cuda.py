"""`dwdp verify` on CUDA: tiny DeepSeek-shaped model (MLA + YaRN preset dims kept small), bf16, 2 ranks sharing the GPU.

The DeepSeek-R1-width FP8 check is one command (docs/history/benchmarks-2026-12.md section 6):
    dwdp verify configs/verify/h200_dsr1_fp8.yaml --device cuda
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from dwdp_trtllm.commands.verify import run_verify
from dwdp_trtllm.spec.config import load_bench_points

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("weight_dtype", ["bf16", "fp8"])
def test_verify_tiny_cuda(weight_dtype):
    cfg = load_bench_points({"model": {"preset": "tiny-vmm", "dtype": "bf16"},
                             "dwdp": {"dwdp_size": 2, "weight_dtype": weight_dtype, "gemm": "merge"},
                             "workload": {"isl": 96, "requests_per_rank": 2, "max_num_tokens": 128},
                             "run": {"device": "cuda", "ranks": 2, "warmup_iters": 0, "timeout_s": 240}})[1][0]
    rows, tol, ok = run_verify(cfg)
    assert set(rows) == {"dep", "dwdp"}
    assert ok, rows
    assert all(0 <= r["hidden_rel"] <= tol for r in rows.values())
