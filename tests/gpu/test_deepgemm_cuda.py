"""DeepGEMM's FP8 block-scale grouped GEMM through dwdp_trtllm/ops/deepgemm.py on the GPU: against the float64
dequantised reference and against our op on the same inputs (issue 25).

Needs deep_gemm built (scripts/gpu/deepgemm_build.sh; DWDP_DEEPGEMM_DIR names the tree). Where DeepGEMM is absent the
tests skip with the import's reason (DeepGEMM is optional); where DWDP_DEEPGEMM_DIR names a tree that does not load
(scripts/gpu_check.sh's deepgemm section builds one and sets it) they FAIL: a broken build is not skipped. Tolerance: ||out - ref|| / ||ref|| <= 1e-2 against float64 products of
the same e4m3 values and scales (accumulation order, FP32 promotion per 128-deep K block and the BF16 output rounding
differ); DeepGEMM vs our op <= 1e-2 likewise (not bit-exact: two kernels, two accumulation orders).
The engine's whole routed-expert op with gemm=deepgemm (engine/moe_deepgemm.py: one gather to the padded rows, the
combine through the padded index) against gemm=multi_buffer: <= 1e-2 relative, and bit-identical as a separate claim
(docs/history/benchmarks-2026-12.md section 13 found DeepGEMM's GEMM output bit-identical to ours on R1 shapes). Its first run
JIT-compiles two kernels (16 experts: fc1 and fc2 shapes).
"""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                                 reason="DeepGEMM's FP8 FP32-scale path is sm_90 only")]

from dwdp_trtllm import env  # noqa: E402
from dwdp_trtllm.ops import deepgemm as dgl  # noqa: E402
from dwdp_trtllm.ops.reference import grouped_gemm_reference  # noqa: E402


def deepgemm_gate() -> None:
    """Returns when deep_gemm loads. Otherwise skips with the import's reason, or fails when DWDP_DEEPGEMM_DIR is set
    (a tree was named, so it was meant to load). tests/unit/test_gpu_skip_reasons.py checks both on the CPU."""
    try:
        dgl.module()
    except dgl.DeepGEMMUnavailable as e:
        root = env.deepgemm_dir()
        if root:
            pytest.fail(f"DWDP_DEEPGEMM_DIR={root} is set but {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="module", autouse=True)
def deepgemm_ready():
    deepgemm_gate()


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


def _op_case(routing, seed, E=16, H=7168, I=2048, T=600, K=8):
    """Random FP8 experts (e4m3 codes N(0,1)*64, never zeros; 128x128 scales), bf16 tokens, K distinct experts per
    token: uniform, or skewed (popularity ~ 1/(e+1)^1.5 with experts 3 and 11 never routed: ragged and empty)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    f8 = torch.float8_e4m3fn
    w13 = (torch.randn(E, 2 * I, H, device="cuda", generator=g) * 64).to(f8)
    s13 = torch.rand(E, 2 * I // 128, H // 128, device="cuda", generator=g) * 1e-3 + 2e-4
    w2 = (torch.randn(E, H, I, device="cuda", generator=g) * 64).to(f8)
    s2 = torch.rand(E, H // 128, I // 128, device="cuda", generator=g) * 1e-3 + 2e-4
    x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
    p = torch.ones(E, device="cuda") if routing == "uniform" else 1.0 / torch.arange(1, E + 1, device="cuda") ** 1.5
    if routing == "skewed":
        p[[3, 11]] = 0
    ids = torch.multinomial(p.expand(T, E), K, replacement=False, generator=g)
    w = torch.rand(T, K, device="cuda", generator=g)
    return w13, s13, w2, s2, x, ids, w / w.sum(-1, keepdim=True)


def _both(routing, up_first, seed):
    """(deepgemm on one buffer, multi_buffer over [4 local | E - 4 slot]) of the engine's whole routed-expert op."""
    from dwdp_trtllm.engine import moe_compute as mc
    w13, s13, w2, s2, x, ids, w = _op_case(routing, seed)
    E, L = w13.shape[0], 4
    y_dg = mc.routed_experts_forward(x, ids, w, [w13], [w2], *mc.identity_map(E, "cuda"), gemm="deepgemm",
                                     w13_scale_sources=[s13], w2_scale_sources=[s2], up_first=up_first)
    split = lambda t: [t[:L].clone(), t[L:].clone()]  # noqa: E731
    bidx = torch.tensor([0] * L + [1] * (E - L), dtype=torch.int32, device="cuda")
    row = torch.tensor(list(range(L)) + list(range(E - L)), dtype=torch.int32, device="cuda")
    y_mb = mc.routed_experts_forward(x, ids, w, split(w13), split(w2), bidx, row, gemm="multi_buffer",
                                     w13_scale_sources=split(s13), w2_scale_sources=split(s2), up_first=up_first)
    counts = torch.bincount(ids.flatten(), minlength=E)
    return y_dg, y_mb, counts


@pytest.mark.parametrize("routing,up_first", [("uniform", False), ("skewed", True)])
def test_routed_op_deepgemm_matches_multi_buffer(routing, up_first):
    """The whole op (one gather to DeepGEMM's padded rows, fc1, SwiGLU + quant, fc2, combine through the padded
    index) against gemm=multi_buffer on the same inputs: within 1e-2 relative (the bound that holds whatever the
    kernels' accumulation order); bit-equality is the next test's claim."""
    y_dg, y_mb, counts = _both(routing, up_first, seed=11)
    if routing == "skewed":
        assert (counts == 0).sum() == 2 and counts.max() > 128  # empty experts and multi-block ones
    assert y_dg.dtype == torch.bfloat16 and torch.isfinite(y_dg).all() and y_mb.abs().max() > 0
    assert rel(y_dg, y_mb) <= 1e-2


@pytest.mark.parametrize("routing", ["uniform", "skewed"])
def test_routed_op_deepgemm_is_bit_identical_to_multi_buffer(routing):
    """docs/history/benchmarks-2026-12.md section 13: DeepGEMM's GEMM output equals ours bit for bit on R1 shapes; the rest of the
    op is the same kernels on the same real rows, so the whole op should be bit-identical."""
    y_dg, y_mb, _ = _both(routing, False, seed=12)
    assert torch.equal(y_dg, y_mb), f"max |dg - mb| = {float((y_dg.float() - y_mb.float()).abs().max())}, rel {rel(y_dg, y_mb):.2e}"


def test_routed_op_deepgemm_refuses_split_buffers():
    from dwdp_trtllm.engine import moe_compute as mc
    w13, s13, w2, s2, x, ids, w = _op_case("uniform", 13, E=4, H=256, I=128, T=8, K=2)
    bidx = torch.tensor([0, 0, 1, 1], device="cuda")
    row = torch.tensor([0, 1, 0, 1], device="cuda")
    with pytest.raises(ValueError, match=r"gemm='deepgemm' \(w13\) takes one \[E, N, K\] buffer, got 2"):
        mc.routed_experts_forward(x, ids, w, [w13[:2], w13[2:]], [w2[:2], w2[2:]], bidx, row, gemm="deepgemm",
                                  w13_scale_sources=[s13[:2], s13[2:]], w2_scale_sources=[s2[:2], s2[2:]])
