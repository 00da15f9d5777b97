"""dwdp::grouped_gemm CUDA (CUTLASS sm90a) against the float64 reference on random data.

Tolerances: BF16 ||out-ref||/||ref|| <= 1e-2 (bf16 operands, fp32 accumulation, bf16 output rounding);
FP8 <= 1e-2 against the float64 reference on the SAME e4m3 values and scales (only accumulation order and the bf16
output rounding differ), and <= 0.1 against the unquantised float inputs (e4m3 carries 3 mantissa bits).
"""
from __future__ import annotations

import importlib
import zlib

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                                 reason="the CUTLASS kernels are built for sm_90a (H100/H200)")]

from dwdp_trtllm.ops import grouped_gemm, grouped_gemm_reference, quantize_fp8_blockwise  # noqa: E402

gg_mod = importlib.import_module("dwdp_trtllm.ops.grouped_gemm")


@pytest.fixture(scope="module", autouse=True)
def op_ready():
    if not gg_mod.available():
        pytest.fail(f"the CUDA op must build on the GPU machine: {gg_mod.why_unavailable()}")


def make_case(counts, buffer_rows, bidx, rows, K, N, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T = sum(counts)
    a = torch.randn(T, K, generator=g, device="cuda").to(dtype)
    w = [torch.randn(r, N, K, generator=g, device="cuda").to(dtype) for r in buffer_rows]
    offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    as_i32 = lambda x: torch.tensor(x, dtype=torch.int32, device="cuda")  # noqa: E731
    return a, offs, w, as_i32(bidx), as_i32(rows)


def rel_err(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


CASES = {
    # 0 and 1 token experts, counts off the 64/128-row tiles, two buffers in mixed order
    "mixed": ([0, 1, 130, 7, 0, 257, 64, 3], [5, 4], [1, 0, 1, 0, 1, 0, 0, 1], [3, 0, 0, 4, 1, 1, 2, 2]),
    # every expert from a different buffer
    "one_buffer_each": ([9, 0, 200, 1, 33, 128], [1, 2, 1, 3, 1, 1], [0, 1, 2, 3, 4, 5], [0, 1, 0, 2, 0, 0]),
    # all experts from one buffer, permuted rows
    "all_one_buffer": ([17, 300, 0, 1, 65], [5], [0] * 5, [4, 2, 0, 1, 3]),
    # many rows per expert: the cooperative 128x256 variant (T >= 96 E)
    "large_groups": ([513, 129, 700, 255], [2, 2], [0, 1, 1, 0], [1, 0, 1, 0]),
}


@pytest.mark.parametrize("K,N", [(256, 384), (512, 264)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bf16_matches_reference(case, K, N):
    a, offs, w, bidx, rows = make_case(*CASES[case], K=K, N=N, seed=zlib.crc32(f"{case}{K}".encode()) % 1000)  # stable across runs (str hash is salted)
    out = grouped_gemm(a, offs, w, bidx, rows, backend="op")
    ref = grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert rel_err(out, ref) <= 1e-2
    start = 0  # per expert too: a wrong buffer or row must not hide inside a global norm
    for e, end in enumerate(offs.tolist()):
        if end > start:
            assert rel_err(out[start:end], ref[start:end]) <= 1e-2, f"expert {e}"
        start = end


@pytest.mark.parametrize("case", sorted(CASES))
def test_fp8_blockwise_matches_reference(case):
    K, N = 512, 384
    a32, offs, w32, bidx, rows = make_case(*CASES[case], K=K, N=N, dtype=torch.float32, seed=7)
    aq, sa = quantize_fp8_blockwise(a32, (1, 128))
    q = [quantize_fp8_blockwise(w, (128, 128)) for w in w32]
    wq, sw = [x for x, _ in q], [s for _, s in q]
    out = grouped_gemm(aq, offs, wq, bidx, rows, sa, sw, backend="op")
    ref = grouped_gemm_reference(aq, offs, wq, bidx, rows, sa, sw, dtype=torch.float64)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert rel_err(out, ref) <= 1e-2
    assert rel_err(out, grouped_gemm_reference(a32, offs, w32, bidx, rows, dtype=torch.float64)) <= 0.1


def test_every_row_written_and_graph_capture():
    a, offs, w, bidx, rows = make_case(*CASES["mixed"], K=256, N=384, seed=11)
    torch.ops.dwdp.grouped_gemm(a, offs, w, bidx, rows)  # warm up outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = torch.ops.dwdp.grouped_gemm(a, offs, w, bidx, rows)
    for seed in (1, 2):  # new data and a new routing, same shapes: replay must follow the device-side offsets
        a2, offs2, w2, bidx2, rows2 = make_case([5, 0, 200, 1, 9, 100, 64, 83], [5, 4], [0, 1, 0, 1, 0, 1, 1, 0],
                                                [0, 0, 1, 1, 2, 2, 3, 4], K=256, N=384, seed=seed)
        for dst, src in zip([a, offs, bidx, rows, *w], [a2, offs2, bidx2, rows2, *w2]):
            dst.copy_(src)
        out.fill_(float("nan"))  # poison: every row must be rewritten
        g.replay()
        torch.cuda.synchronize()
        ref = grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64)
        assert not out.isnan().any() and rel_err(out, ref) <= 1e-2


def test_torch_compile_uses_fake_impl():
    a, offs, w, bidx, rows = make_case(*CASES["mixed"], K=256, N=384, seed=5)
    f = torch.compile(lambda a, o, w0, w1, b, r: torch.ops.dwdp.grouped_gemm(a, o, [w0, w1], b, r) * 2.0,
                      fullgraph=True)
    out = f(a, offs, w[0], w[1], bidx, rows)
    ref = grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64) * 2.0
    assert rel_err(out, ref) <= 1e-2


def _fp8_case(counts, buffer_rows, bidx, rows, K, N, seed):
    a32, offs, w32, bidx_t, rows_t = make_case(counts, buffer_rows, bidx, rows, K=K, N=N, dtype=torch.float32, seed=seed)
    aq, sa = quantize_fp8_blockwise(a32, (1, 128))
    q = [quantize_fp8_blockwise(w, (128, 128)) for w in w32]
    return aq, sa, offs, [x for x, _ in q], [s for _, s in q], bidx_t, rows_t


def _contiguous(wq, sw, bidx, rows):
    """The same experts as one [E, N, K] buffer in expert order (what DEP / the composite view read)."""
    b, r = bidx.tolist(), rows.tolist()
    w = torch.stack([wq[b[e]][r[e]] for e in range(len(b))])
    s = torch.stack([sw[b[e]][r[e]] for e in range(len(b))])
    ar = torch.arange(len(b), dtype=torch.int32, device="cuda")
    return [w], [s], torch.zeros_like(ar), ar


def test_fp8_every_variant_built_exact_and_correct():
    """Every FP8 variant of ops/build.py is in the library, and each (with default and non-default scheduler knobs)
    gives the same bits from [local, slot] buffers as from one contiguous buffer, within 1e-2 of the reference."""
    from dwdp_trtllm.ops.build import FP8_VARIANTS

    built = list(torch.ops.dwdp.grouped_gemm_fp8_variants())
    assert sorted(built) == sorted(FP8_VARIANTS)
    aq, sa, offs, wq, sw, bidx, rows = _fp8_case(*CASES["mixed"], K=512, N=384, seed=3)
    ref = grouped_gemm_reference(aq, offs, wq, bidx, rows, sa, sw, dtype=torch.float64)
    wc, sc, bc, rc = _contiguous(wq, sw, bidx, rows)
    for v in built:
        for raster, swizzle in ((0, 0), (2, 2), (1, 4)):
            out = torch.ops.dwdp.grouped_gemm_fp8_tune(aq, offs, wq, bidx, rows, sa, sw, v, raster, swizzle)
            contig = torch.ops.dwdp.grouped_gemm_fp8_tune(aq, offs, wc, bc, rc, sa, sc, v, raster, swizzle)
            assert torch.equal(out, contig), f"{v} r{raster} s{swizzle}: multi_buffer != contiguous"
            assert rel_err(out[: offs[-1]], ref[: offs[-1]]) <= 1e-2, f"{v} r{raster} s{swizzle}"


@pytest.mark.parametrize("N,K", [(4096, 7168), (7168, 2048), (384, 512)])
@pytest.mark.parametrize("rows_per_expert", [100, 300])  # either side of the few-rows split (256 per expert)
def test_fp8_op_runs_the_dispatched_variant(N, K, rows_per_expert):
    """The production op on DeepSeek shapes equals, bit for bit, the variant and knobs its dispatch names
    (grouped_gemm_fp8_dispatch.h), and is bit-exact against its contiguous-buffer result."""
    counts = [rows_per_expert + d for d in (5, -7, 0, 13, -1, 2)]
    aq, sa, offs, wq, sw, bidx, rows = _fp8_case(counts, [4, 3], [1, 0, 1, 0, 0, 1], [0, 3, 1, 0, 2, 2], K=K, N=N, seed=9)
    v, raster, swizzle = torch.ops.dwdp.grouped_gemm_fp8_choice(sum(counts), len(counts), N, K).split(",")
    out = torch.ops.dwdp.grouped_gemm(aq, offs, wq, bidx, rows, sa, sw)
    tuned = torch.ops.dwdp.grouped_gemm_fp8_tune(aq, offs, wq, bidx, rows, sa, sw, v, int(raster), int(swizzle))
    assert torch.equal(out, tuned), f"op != {v},{raster},{swizzle}"
    wc, sc, bc, rc = _contiguous(wq, sw, bidx, rows)
    assert torch.equal(out, torch.ops.dwdp.grouped_gemm(aq, offs, wc, bc, rc, sa, sc))
    ref = grouped_gemm_reference(aq, offs, wq, bidx, rows, sa, sw, dtype=torch.float64)
    assert rel_err(out, ref) <= 1e-2


def test_bf16_every_variant_built_and_correct():
    """Every BF16 variant (1x2 and 2x1 clusters, ping-pong) is in the library and, from [local, slot] buffers, gives
    the same bits as from one contiguous buffer, within 1e-2 of the float64 reference, on ragged groups (0 and 1 row,
    odd row-tile counts: the 2x1 cluster's second CTA past an expert's last tile)."""
    built = list(torch.ops.dwdp.grouped_gemm_bf16_variants())
    assert sorted(built) == ["coop", "coop_c2x1", "pingpong"], built
    for case in ("mixed", "large_groups"):
        a, offs, w, bidx, rows = make_case(*CASES[case], K=512, N=264, seed=4)
        ref = grouped_gemm_reference(a, offs, w, bidx, rows, dtype=torch.float64)
        b, r = bidx.tolist(), rows.tolist()
        wc = [torch.stack([w[b[e]][r[e]] for e in range(len(b))])]
        ar = torch.arange(len(b), dtype=torch.int32, device="cuda")
        for v in built:
            out = torch.ops.dwdp.grouped_gemm_bf16_tune(a, offs, w, bidx, rows, v)
            contig = torch.ops.dwdp.grouped_gemm_bf16_tune(a, offs, wc, torch.zeros_like(ar), ar, v)
            assert torch.equal(out, contig), f"{case} {v}: multi_buffer != contiguous"
            assert rel_err(out, ref) <= 1e-2, f"{case} {v}"


@pytest.mark.parametrize("rows_per_expert", [50, 128, 300])  # ping-pong below 96 rows per expert, 2x1 cluster above
def test_bf16_op_runs_the_dispatched_variant(rows_per_expert):
    """The production BF16 op equals, bit for bit, the variant its dispatch names for these (T, E)."""
    counts = [rows_per_expert + d for d in (5, -7, 0, 13, -1, 2)]
    a, offs, w, bidx, rows = make_case(counts, [4, 3], [1, 0, 1, 0, 0, 1], [0, 3, 1, 0, 2, 2], K=512, N=384, seed=6)
    v = torch.ops.dwdp.grouped_gemm_bf16_choice(sum(counts), len(counts))
    assert v == {50: "pingpong", 128: "coop_c2x1", 300: "coop_c2x1"}[rows_per_expert]
    out = torch.ops.dwdp.grouped_gemm(a, offs, w, bidx, rows)
    assert torch.equal(out, torch.ops.dwdp.grouped_gemm_bf16_tune(a, offs, w, bidx, rows, v))
