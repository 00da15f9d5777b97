"""DeepGEMM's FP8 block-scale grouped GEMM through dwdp_trtllm/ops/deepgemm.py on the GPU: against the float64
dequantised reference and against our op on the same inputs (issue 25).

Needs deep_gemm built (scripts/gpu/deepgemm_build.sh; DWDP_DEEPGEMM_DIR names the tree): on a Hopper machine a
missing DeepGEMM FAILS here, it is not skipped. Tolerance: ||out - ref|| / ||ref|| <= 1e-2 against float64 products of
the same e4m3 values and scales (accumulation order, FP32 promotion per 128-deep K block and the BF16 output rounding
differ); DeepGEMM vs our op <= 1e-2 likewise (not bit-exact: two kernels, two accumulation orders).
"""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                                 reason="DeepGEMM's FP8 FP32-scale path is sm_90 only")]

from dwdp_trtllm.ops import deepgemm as dgl  # noqa: E402
from dwdp_trtllm.ops.reference import grouped_gemm_reference  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def deepgemm_ready():
    try:
        dgl.module()
    except dgl.DeepGEMMUnavailable as e:
        pytest.fail(str(e))


def case(counts, N, K, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    E, R = len(counts), sum(counts)
    f8 = torch.float8_e4m3fn
    a = (torch.randn(R, K, device="cuda", generator=g) * 64).to(f8)
    sa = torch.rand(R, K // 128, device="cuda", generator=g) * 1e-2 + 1e-3
    w = (torch.randn(E, N, K, device="cuda", generator=g) * 64).to(f8)
    sw = torch.rand(E, N // 128, K // 128, device="cuda", generator=g) * 1e-3 + 1e-4
    offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    return a, sa, w, sw, offs


def rel(x, y):
    return float((x.double() - y.double()).norm() / y.double().norm())


@pytest.mark.parametrize("use_psum", [True, False])
@pytest.mark.parametrize("counts,N,K", [([130, 0, 1, 255, 64, 7, 0, 300], 4096, 7168),   # fc1, ragged, empty experts
                                        ([100, 300, 128, 3], 7168, 2048)])               # fc2
def test_deepgemm_matches_reference_and_our_op(counts, N, K, use_psum):
    a, sa, w, sw, offs = case(counts, N, K, seed=len(counts) + N)
    E = len(counts)
    out = dgl.grouped_gemm_fp8(a, offs, w, sa, sw, use_psum=use_psum)
    assert out.shape == (sum(counts), N) and out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    bidx, rows = torch.zeros(E, dtype=torch.int32, device="cuda"), torch.arange(E, dtype=torch.int32, device="cuda")
    ref = grouped_gemm_reference(a, offs, [w], bidx, rows, sa, [sw], dtype=torch.float64)
    assert rel(out, ref) <= 1e-2
    from dwdp_trtllm.ops import grouped_gemm
    ours = grouped_gemm(a, offs, [w], bidx, rows, a_scale=sa, weight_scales=[sw])
    assert rel(out, ours) <= 1e-2


def test_padding_rows_do_not_leak_into_neighbours():
    """NaN in the padded rows' codes must not reach a real row (each row is its own product)."""
    counts, N, K = [5, 200, 1], 4096, 2048
    a, sa, w, sw, offs = case(counts, N, K, seed=7)
    lay = dgl.padded_layout(offs)
    a_pad = dgl.pad_rows(a, lay)
    sa_pad = dgl.pad_rows(sa, lay)
    pad = lay.m_indices_M < 0
    a_pad.view(torch.uint8)[pad] = 0x7F  # e4m3 NaN
    sa_pad[pad] = float("nan")
    y = dgl.unpad_rows(dgl.grouped_gemm_fp8_padded(a_pad, dgl.transform_activation_scales(sa_pad), w, sw, lay), lay)
    assert torch.isfinite(y).all()
    clean = dgl.grouped_gemm_fp8(a, offs, w, sa, sw)
    assert torch.equal(y, clean)
