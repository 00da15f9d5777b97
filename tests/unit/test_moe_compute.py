"""Grouped expert computation, FP8 blocks, expert layout: against a dense per-token loop."""
import math

import pytest
import torch
import torch.nn.functional as F

from dwdp_trtllm.engine import moe_compute as mc
from dwdp_trtllm.engine.weights import (dequantize_fp8_blockwise, expert_layout, expert_tensors, init_expert,
                                        quantize_fp8_blockwise, stacked_expert_tensors)
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.ops.reference import quantize_fp8_blockwise as ref_quant


E, H, I, T, K = 6, 32, 16, 20, 2


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * I, H, generator=g) / math.sqrt(H)
    w2 = torch.randn(E, H, I, generator=g) / math.sqrt(I)
    x = torch.randn(T, H, generator=g)
    # expert 0: no token, expert 1: exactly one token, the rest random over experts 2..5
    ids = torch.stack([torch.randperm(4, generator=g)[:K] + 2 for _ in range(T)])
    ids[7, 0] = 1
    w = torch.rand(T, K, generator=g)
    return w13, w2, x, ids, w


def _dense_loop(w13, w2, x, ids, w):
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = w13[e] @ x[t]
            y[t] += w[t, k] * (w2[e] @ (F.silu(h[:I]) * h[I:]))
    return y


def _two_buffers(w13, w2):
    """Experts split over two buffers in shuffled rows: buf0 holds [4, 1, 5], buf1 holds [0, 2, 3]."""
    held = [[4, 1, 5], [0, 2, 3]]
    buf_idx = torch.empty(E, dtype=torch.int64)
    row = torch.empty(E, dtype=torch.int64)
    for b, es in enumerate(held):
        for r, e in enumerate(es):
            buf_idx[e], row[e] = b, r
    return [w13[h] for h in held], [w2[h] for h in held], buf_idx, row


def test_sort_by_expert():
    _, _, _, ids, _ = _case()
    perm, offs, counts = mc.sort_by_expert(ids, E)
    flat = ids.reshape(-1)
    assert offs.dtype == torch.int32 and offs[-1] == T * K
    assert counts[0] == 0 and counts[1] == 1
    assert torch.equal(counts, torch.bincount(flat, minlength=E))
    assert torch.equal(flat[perm], flat.sort().values)


@pytest.mark.parametrize("gemm", ["reference", "merge"])
@pytest.mark.parametrize("buffers", [1, 2])
def test_routed_experts_match_dense_loop(gemm, buffers):
    w13, w2, x, ids, w = _case()
    if buffers == 1:
        srcs13, srcs2, buf_idx, row = [w13], [w2], torch.zeros(E, dtype=torch.int64), torch.arange(E)
    else:
        srcs13, srcs2, buf_idx, row = _two_buffers(w13, w2)
    y = mc.routed_experts_forward(x, ids, w, srcs13, srcs2, buf_idx, row, gemm=gemm)
    torch.testing.assert_close(y, _dense_loop(w13, w2, x, ids, w), atol=1e-5, rtol=1e-5)


def test_gather_experts_two_buffers():
    w13, w2, *_ = _case()
    srcs13, _, buf_idx, row = _two_buffers(w13, w2)
    assert torch.equal(mc.gather_experts(srcs13, buf_idx, row), w13)
    # int32 maps, a third buffer with a redundant copy of expert 2 (unused) and an empty buffer
    srcs13 = srcs13 + [torch.zeros(0, 2 * I, H), w13[[2, 0]] * 0 - 1]
    assert torch.equal(mc.gather_experts(srcs13, buf_idx.int(), row.int()), w13)
    buf_idx[0], row[0] = 3, 1  # expert 0 now read from the third buffer
    want = w13.clone()
    want[0] = -1
    assert torch.equal(mc.gather_experts(srcs13, buf_idx.int(), row.int()), want)


def test_fp8_reference_and_merge_match_dequantized_loop():
    w13, w2, x, ids, w = _case(1)
    per = [expert_tensors(_spec_like(), w13[e], w2[e], "fp8") for e in range(E)]
    st = {n: torch.stack([p[n] for p in per]) for n in per[0]}
    deq13 = dequantize_fp8_blockwise(st["w13"], st["w13_scale"])
    deq2 = dequantize_fp8_blockwise(st["w2"], st["w2_scale"])
    ref = _dense_loop(deq13, deq2, x, ids, w)
    for gemm in ("reference", "merge"):
        y = mc.routed_experts_forward(x, ids, w, [st["w13"]], [st["w2"]], torch.zeros(E, dtype=torch.int64), torch.arange(E),
                                      gemm=gemm, w13_scale_sources=[st["w13_scale"]], w2_scale_sources=[st["w2_scale"]])
        torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="block scales"):
        mc.routed_experts_forward(x, ids, w, [st["w13"]], [st["w2"]], torch.zeros(E, dtype=torch.int64), torch.arange(E))


def _spec_like():
    import dataclasses
    return dataclasses.replace(get_model("tiny"), hidden_size=H, moe_intermediate=I)


def test_registered_path_is_used_and_fp8_fallback_dequantises():
    w13, w2, x, ids, w = _case(2)
    calls = []

    def counting(a, offs, weights, buf_idx, row, scales=None):
        calls.append(weights[0].dtype)
        return mc.GEMM_PATHS["reference"].fn(a, offs, weights, buf_idx, row, scales=scales)

    mc.register_gemm("test_counting", counting, overwrite=True)
    try:
        args = (torch.zeros(E, dtype=torch.int64), torch.arange(E))
        y = mc.routed_experts_forward(x, ids, w, [w13], [w2], *args, gemm="test_counting")
        torch.testing.assert_close(y, _dense_loop(w13, w2, x, ids, w), atol=1e-5, rtol=1e-5)
        assert calls == [torch.float32, torch.float32]
        q13 = [quantize_fp8_blockwise(w13[e]) for e in range(E)]
        q2 = [quantize_fp8_blockwise(w2[e]) for e in range(E)]
        with pytest.warns(RuntimeWarning, match="no fp8 support"):
            mc.routed_experts_forward(x, ids, w, [torch.stack([q for q, _ in q13])], [torch.stack([q for q, _ in q2])], *args,
                                      gemm="test_counting", w13_scale_sources=[torch.stack([s for _, s in q13])],
                                      w2_scale_sources=[torch.stack([s for _, s in q2])])
        assert calls[-1] == torch.float32
        with pytest.raises(ValueError, match="already registered"):
            mc.register_gemm("test_counting", counting)
        with pytest.raises(ValueError, match="gemm='nope'"):
            mc.routed_experts_forward(x, ids, w, [w13], [w2], *args, gemm="nope")
    finally:
        mc.GEMM_PATHS.pop("test_counting", None)


def test_fp8_blockwise_roundtrip_off_tile():
    w = torch.randn(200, 300, generator=torch.Generator().manual_seed(4))
    w[:128, :128] *= 50  # blocks get their own scales
    q, s = quantize_fp8_blockwise(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (200, 300) and s.shape == (2, 3)
    back = dequantize_fp8_blockwise(q, s)
    rel = (back - w).abs() / (w.abs() + 1e-3)
    assert rel.median() < 0.04 and (back - w).abs().max() < 0.07 * w.abs().max()


@pytest.mark.parametrize("wd", ["float32", "bf16", "fp8"])
def test_expert_layout_matches_tensors(wd):
    spec = get_model("tiny")
    t = expert_tensors(spec, *init_expert(spec, 1, 3, seed=7, dtype=torch.float32, device="cpu"), wd)
    lay = expert_layout(spec, wd)
    assert lay.tensor_names == tuple(t)
    assert lay.tensor_bytes == tuple(v.numel() * v.element_size() for v in t.values())
    assert lay.expert_bytes == spec.expert_bytes(wd)


def test_init_expert_deterministic_and_independent():
    spec = get_model("tiny")
    a13, a2 = init_expert(spec, 2, 5, seed=11, dtype=torch.float32, device="cpu")
    b13, b2 = init_expert(spec, 2, 5, seed=11, dtype=torch.float32, device="cpu")
    assert torch.equal(a13, b13) and torch.equal(a2, b2)
    c13, _ = init_expert(spec, 2, 6, seed=11, dtype=torch.float32, device="cpu")
    d13, _ = init_expert(spec, 3, 5, seed=11, dtype=torch.float32, device="cpu")
    assert not torch.equal(a13, c13) and not torch.equal(a13, d13)
    st = stacked_expert_tensors(spec, 2, [4, 5], seed=11, weight_dtype="bf16", device="cpu")
    assert torch.equal(st["w13"][1], a13.bfloat16()) and st["w2"].shape == (2, spec.hidden_size, spec.moe_intermediate)
    assert a13.std() == pytest.approx(1 / math.sqrt(spec.hidden_size), rel=0.1)
    with pytest.raises(ValueError, match="not a MoE layer"):
        init_expert(spec, 0, 0, seed=1, dtype=torch.float32, device="cpu")


def test_identity_map_uses_the_buffer_in_place_and_other_maps_gather():
    from dwdp_trtllm.engine.moe_compute import gather_experts, identity_map
    w = torch.randn(5, 3, 4)
    bidx, rows = identity_map(5, "cpu")
    assert identity_map(5, "cpu")[0] is bidx  # cached: holders share the same tensors
    assert gather_experts([w], bidx, rows) is w  # no copy for an expert-ordered buffer
    perm = torch.tensor([4, 3, 2, 1, 0], dtype=torch.int32)
    out = gather_experts([w], bidx.clone(), perm)  # equal values but not the identity tensors: a real gather
    assert out is not w and torch.equal(out, w.flip(0))
    same_values = gather_experts([w], bidx.clone(), rows.clone())
    assert same_values is not w and torch.equal(same_values, w)


def test_gather_experts_fp8_two_buffers_bit_exact():
    # index_copy_ has no fp8 kernel on the CPU: the gather moves the bytes (uint8 view) instead
    w = (torch.randn(6, 4, 8) * 3).to(torch.float8_e4m3fn)
    local, fetched = [4, 1], [0, 5, 2, 3]
    buf_idx = torch.tensor([0 if e in local else 1 for e in range(6)], dtype=torch.int32)
    row = torch.tensor([local.index(e) if e in local else fetched.index(e) for e in range(6)], dtype=torch.int32)
    out = mc.gather_experts([w[local], w[fetched]], buf_idx, row)
    assert out.dtype == torch.float8_e4m3fn and torch.equal(out.view(torch.uint8), w.view(torch.uint8))


def test_sync_warning_classifier():
    from dwdp_trtllm.engine.dwdp import is_sync_warning
    assert is_sync_warning("called a synchronizing CUDA operation")
    # torch's one-time notice when the debug mode is switched on (was miscounted as a sync on the H200)
    assert not is_sync_warning("Synchronization debug mode is a prototype feature and does not yet detect all "
                               "synchronizing operations (Triggered internally at ...)")


def test_combine_in_chunks_equals_one_pass(monkeypatch):
    g = torch.Generator().manual_seed(3)
    T, K, H = 37, 3, 16
    ids = torch.randint(0, 5, (T, K), generator=g)
    w = torch.rand(T, K, generator=g)
    perm, _, _ = mc.sort_by_expert(ids, 5)
    y = torch.randn(T * K, H, generator=g)
    want = torch.zeros(T, H).index_add_(0, torch.div(perm, K, rounding_mode="floor"), y * w.reshape(-1)[perm][:, None])
    monkeypatch.setattr(mc, "COMBINE_CHUNK_BYTES", 4 * H * 7)  # 7 rows per chunk, the last one partial
    assert torch.equal(mc.combine(y, perm, w, T), want)


def test_gather_experts_reuses_destinations_per_map_and_sees_in_place_changes():
    w = torch.randn(5, 2, 3)
    local, fetched = [3, 0], [1, 4, 2]
    bidx = torch.tensor([0 if e in local else 1 for e in range(5)], dtype=torch.int32)
    row = torch.tensor([local.index(e) if e in local else fetched.index(e) for e in range(5)], dtype=torch.int32)
    bufs = [w[local], w[fetched]]
    assert torch.equal(mc.gather_experts(bufs, bidx, row), w)
    assert torch.equal(mc.gather_experts([b * 2 for b in bufs], bidx, row), w * 2)  # cached rows, new data
    bidx[3], row[3], bidx[1], row[1] = 1, 0, 0, 0  # in place: experts 3 and 1 swap their source rows
    want = w.clone()
    want[3], want[1] = w[1], w[3]
    assert torch.equal(mc.gather_experts(bufs, bidx, row), want)


def test_fp8_rows_quantised_before_the_gather_equal_rows_quantised_after():
    """gather_sorted(fp8_rows=True) quantises T rows then gathers: bit-equal to quantising the T*K gathered rows."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(T, 256, generator=g) * 3
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    rows, perm, offs, counts = mc.gather_sorted(x, ids, E, fp8_rows=True)
    plain, perm2, offs2, _ = mc.gather_sorted(x, ids, E)
    q_ref, s_ref = ref_quant(plain, (1, 128))
    assert isinstance(rows, mc.Fp8Rows) and torch.equal(perm, perm2) and torch.equal(offs, offs2)
    assert rows.q.dtype == torch.float8_e4m3fn and torch.equal(rows.q.view(torch.uint8), q_ref.view(torch.uint8))
    assert torch.equal(rows.scale, s_ref)


def test_fp8_rows_path_equals_the_bf16_input_path():
    """A path taking Fp8Rows (fp8_activations) computes what the same path computes from bf16 rows that it
    quantises itself: the SwiGLU output quantised in one step equals silu_mul then the quantiser."""
    seen = []

    def spy(a, offs, weights, bidx, row, scales=None):
        seen.append(type(a).__name__)
        if not isinstance(a, mc.Fp8Rows):
            a = mc.quantize_act_1x128(a)
        deq = (a.q.float().view(a.q.shape[0], -1, 128) * a.scale[..., None]).view(a.q.shape)
        return mc.GEMM_PATHS["reference"].fn(deq, offs, weights, bidx, row, scales=scales).to(torch.bfloat16)

    mc.register_gemm("spy_fp8_rows", spy, supports_fp8=True, fp8_activations=True, overwrite=True)
    try:
        g = torch.Generator().manual_seed(8)
        Hq, Iq = 256, 128
        w13 = torch.randn(E, 2 * Iq, Hq, generator=g) / 16
        w2 = torch.randn(E, Hq, Iq, generator=g) / 11
        (q13, s13), (q2, s2) = ref_quant(w13, (128, 128)), ref_quant(w2, (128, 128))
        x = torch.randn(T, Hq, generator=g).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
        w = torch.rand(T, K, generator=g)
        bidx, row = mc.identity_map(E, "cpu")
        y = mc.routed_experts_forward(x, ids, w, [q13], [q2], bidx, row, gemm="spy_fp8_rows",
                                      w13_scale_sources=[s13], w2_scale_sources=[s2])
        assert seen == ["Fp8Rows", "Fp8Rows"] and y.dtype == torch.bfloat16
        x_sorted, perm, offs, _ = mc.gather_sorted(x, ids, E)
        h = spy(x_sorted, offs, [q13], bidx, row, scales=[s13])
        y_sorted = spy(mc.silu_mul(h), offs, [q2], bidx, row, scales=[s2])
        assert torch.equal(y, mc.combine(y_sorted, perm, w, T, out_dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="Fp8Rows"):
            mc.grouped_gemm(mc.quantize_act_1x128(x), offs, [w13], bidx, row, gemm="reference")
    finally:
        mc.GEMM_PATHS.pop("spy_fp8_rows", None)


def test_up_first_reads_trtllm_w3_w1_halves_in_place():
    """up_first=True (TensorRT-LLM's w3 | w1 rows) equals gate-first on the halves swapped, in bf16 and through
    the FP8 SwiGLU + quantisation."""
    g = torch.Generator().manual_seed(9)
    h = torch.randn(37, 2 * 256, generator=g).to(torch.bfloat16)
    swapped = torch.cat([h[:, 256:], h[:, :256]], 1)
    assert torch.equal(mc.silu_mul(h, up_first=True), mc.silu_mul(swapped))
    assert not torch.equal(mc.silu_mul(h, up_first=True), mc.silu_mul(h))
    a, b = mc.silu_mul_quant(h, up_first=True), mc.silu_mul_quant(swapped)
    assert torch.equal(a.q.view(torch.uint8), b.q.view(torch.uint8)) and torch.equal(a.scale, b.scale)
