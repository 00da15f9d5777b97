"""CUDA fast paths of the engine against their eager / float64 references, on random inputs: the Triton kernels
(elementwise_cuda.py: RMSNorm, add + RMSNorm, SwiGLU, the lse merge; combine_cuda.py: the MoE combine;
router_cuda.py: the grouped sigmoid top-k; quant_cuda.py: FP8 1x128 quantisation and SwiGLU + quantisation;
rope_cuda.py: in-place RoPE; mla_cuda.py: the MLA key) and engine/attention_cuda.py (cuDNN SDPA per segment,
prefix chunks merged by log-sum-exp)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (run on the device: scripts/gpu_check.sh engine)", allow_module_level=True)

from dwdp_trtllm.engine import fused as fz  # noqa: E402
from dwdp_trtllm.engine.attention_cuda import attend_cudnn, cudnn_attention_usable  # noqa: E402
from dwdp_trtllm.engine.layers import apply_rope_  # noqa: E402
from dwdp_trtllm.engine.moe_compute import combine, quantize_act_1x128, silu_mul_quant, sort_by_expert  # noqa: E402
from dwdp_trtllm.ops.reference import quantize_fp8_blockwise  # noqa: E402

DEV = "cuda"


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("T", [1, 37, 4096])
def test_rms_norm_rope_swiglu(T):
    g = torch.Generator(device=DEV).manual_seed(T)
    x = torch.randn(T, 1536, device=DEV, dtype=torch.bfloat16, generator=g)
    w = torch.rand(1536, device=DEV, generator=g) + 0.5
    out = fz.fused("rms_norm", x)(x, w, 1e-6)
    assert out.dtype == x.dtype and rel(out, fz._rms_norm(x, w, 1e-6)) < 1e-2
    r = torch.randn(T, 8, 64, device=DEV, dtype=torch.bfloat16, generator=g)
    cos, sin = torch.rand(T, 32, device=DEV, generator=g), torch.rand(T, 32, device=DEV, generator=g)
    for name in ("rope_interleaved", "rope_neox"):
        got = fz.fused(name, r)(r, cos, sin)
        assert rel(got, fz._BODIES[name](r, cos, sin)) < 1e-2
    r_view = torch.randn(T, 8, 192, device=DEV, dtype=torch.bfloat16, generator=g)[..., 128:]  # MLA: a strided view
    assert rel(fz.fused("rope_interleaved", r_view)(r_view, cos, sin), fz._rope_interleaved(r_view, cos, sin)) < 1e-2
    h = torch.randn(T, 2 * 256, device=DEV, dtype=torch.bfloat16, generator=g)
    assert rel(fz.fused("silu_mul", h)(h), fz._silu_mul(h)) < 1e-2
    a = torch.randn(T, 1536, device=DEV, dtype=torch.bfloat16, generator=g)
    s_fused, h_fused = fz.fused("add_rms_norm", x)(x, a, w, 1e-6)
    assert torch.equal(s_fused, x + a) and rel(h_fused, fz._rms_norm(x + a, w, 1e-6)) < 1e-2
    b = torch.randn(T, 1536, device=DEV, dtype=torch.bfloat16, generator=g)  # routed + shared experts
    s_fused, h_fused = fz.fused("add_rms_norm", x)(x, a, w, 1e-6, b)
    assert torch.equal(s_fused, x + (a + b)) and rel(h_fused, fz._rms_norm(x + (a + b), w, 1e-6)) < 1e-2


@pytest.mark.parametrize("D,strided", [(1024, False), (1152, True), (7168, False)])
def test_quant_1x128_matches_reference_quantiser(D, strided):
    """Widths that fill whole programs (8 groups) and not (9 groups: masked), rows with a stride past D."""
    g = torch.Generator(device=DEV).manual_seed(D)
    a = torch.randn(333, D + 256 * strided, device=DEV, dtype=torch.bfloat16, generator=g)[:, :D] * 3
    rows = quantize_act_1x128(a)  # engine/quant_cuda.py on CUDA
    q, s = rows.q, rows.scale
    q_ref, s_ref = quantize_fp8_blockwise(a, (1, 128))
    assert q.shape == q_ref.shape and s.shape == s_ref.shape and q.is_contiguous() and s.is_contiguous()
    assert q.dtype == torch.float8_e4m3fn
    torch.testing.assert_close(s, s_ref, rtol=1e-6, atol=0)
    mismatch = (q.float() != q_ref.float()).float().mean().item()
    assert mismatch < 1e-3, f"{mismatch:.2%} of fp8 codes differ from the reference quantiser"


@pytest.mark.parametrize("interleaved", [True, False])
def test_rope_in_place_on_a_strided_view(interleaved):
    """engine/rope_cuda.py rotates MLA's q rope part where it lives ([T, N, 192][..., 128:]) and leaves the nope
    part alone; equal to the eager float32 rotation rounded once."""
    g = torch.Generator(device=DEV).manual_seed(5 + interleaved)
    q = torch.randn(301, 20, 192, device=DEV, dtype=torch.bfloat16, generator=g)
    cos, sin = torch.rand(301, 32, device=DEV, generator=g), torch.rand(301, 32, device=DEV, generator=g)
    body = fz._rope_interleaved if interleaved else fz._rope_neox
    want = body(q[..., 128:].clone(), cos, sin)
    nope = q[..., :128].clone()
    out = apply_rope_(q[..., 128:], cos, sin, interleaved)
    assert out.data_ptr() == q[..., 128:].data_ptr()
    assert torch.equal(q[..., :128], nope)
    assert (q[..., 128:].float() - want.float()).abs().max().item() <= 2 ** -6 * want.float().abs().max().item()


def test_mla_key_kernel_equals_cat_with_broadcast_rope():
    from dwdp_trtllm.engine.mla_cuda import mla_key_
    g = torch.Generator(device=DEV).manual_seed(6)
    nope = torch.randn(333, 40, 128, device=DEV, dtype=torch.bfloat16, generator=g)
    rope = torch.randn(333, 64, device=DEV, dtype=torch.bfloat16, generator=g)
    out = torch.full((333 + 7, 40, 192), float("nan"), device=DEV, dtype=torch.bfloat16)  # poisoned, rows past S kept
    mla_key_(out[:333], nope, rope)
    assert torch.equal(out[:333], torch.cat([nope, rope[:, None, :].expand(-1, 40, -1)], -1))
    assert out[333:].isnan().all()


def test_swiglu_pair_and_lse_merge_match_their_references():
    g = torch.Generator(device=DEV).manual_seed(7)
    a, b = (torch.randn(1000, 1408, device=DEV, dtype=torch.bfloat16, generator=g) for _ in range(2))
    got, want = fz.fused("silu_mul_pair", a)(a, b), fz._silu_mul_pair(a, b)
    assert (got.float() - want.float()).abs().max().item() <= 2 ** -7 * want.float().abs().max().item()
    N, L, e = 8, 300, 128
    o1, o2 = (torch.randn(1, N, L, e, device=DEV, dtype=torch.bfloat16, generator=g) for _ in range(2))
    l1, l2 = (torch.randn(1, N, L, device=DEV, generator=g) * 3 for _ in range(2))
    o2_strided = torch.randn(1, L + 5, N, e, device=DEV, dtype=torch.bfloat16, generator=g)[:, :L].transpose(1, 2)
    for other in (o2, o2_strided):
        got = fz.fused("lse_merge", o1)(o1, l1, other, l2)
        assert got.shape == (1, N, L, e) and got[0].transpose(0, 1).is_contiguous()
        assert rel(got, fz._lse_merge(o1, l1, other, l2)) < 1e-2


def test_silu_mul_quant_matches_the_two_step_reference():
    g = torch.Generator(device=DEV).manual_seed(4)
    h = torch.randn(517, 2 * 512, device=DEV, dtype=torch.bfloat16, generator=g) * 2
    rows = silu_mul_quant(h)
    q_ref, s_ref = quantize_fp8_blockwise(fz._silu_mul(h), (1, 128))
    torch.testing.assert_close(rows.scale, s_ref, rtol=1e-2, atol=0)
    deq, deq_ref = (q.float().view(517, 4, 128) * s[..., None] for q, s in ((rows.q, rows.scale), (q_ref, s_ref)))
    assert rel(deq, deq_ref) < 2e-2
    up_first = silu_mul_quant(torch.cat([h[:, 512:], h[:, :512]], 1), up_first=True)  # TensorRT-LLM's w3 | w1 halves
    assert torch.equal(up_first.q.view(torch.uint8), rows.q.view(torch.uint8)) and torch.equal(up_first.scale, rows.scale)


@pytest.mark.parametrize("T,E,K,H", [(1, 8, 2, 256), (513, 64, 8, 256), (4099, 256, 8, 7168)])
def test_combine_triton_matches_cpu_path(T, E, K, H):
    """engine/combine_cuda.py against the CPU path (index_add_ in expert order), float32 and bf16 outputs."""
    g = torch.Generator(device=DEV).manual_seed(T)
    ids = torch.stack([torch.randperm(E, device=DEV, generator=g)[:K] for _ in range(T)])
    w = torch.rand(T, K, device=DEV, generator=g)
    perm, _, _ = sort_by_expert(ids, E)
    y_sorted = torch.randn(T * K, H, device=DEV, dtype=torch.bfloat16, generator=g)
    want = combine(y_sorted.cpu(), perm.cpu(), w.cpu(), T)
    got = combine(y_sorted, perm, w, T)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    got_bf16 = combine(y_sorted, perm, w, T, out_dtype=torch.bfloat16)
    assert got_bf16.dtype == torch.bfloat16  # the float32 sums (order differs by ulps) rounded once
    torch.testing.assert_close(got_bf16.cpu().float(), want.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)


def _reference_attention(q_LNd, k_SNd, v_SNe, prefix, scale):
    L, S = q_LNd.shape[0], k_SNd.shape[0]
    s = torch.einsum("lnd,snd->nls", q_LNd.double(), k_SNd.double()) * scale
    mask = torch.arange(S, device=q_LNd.device)[None, :] <= (prefix + torch.arange(L, device=q_LNd.device))[:, None]
    p = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("nls,sne->lne", p, v_SNe.double())


@pytest.mark.parametrize("L,prefix", [(1, 0), (300, 0), (257, 1000), (64, 1)])
def test_attend_cudnn_mla_shapes(L, prefix):
    if not cudnn_attention_usable(0):
        pytest.skip("cuDNN SDPA unusable on this GPU")
    g = torch.Generator(device=DEV).manual_seed(L + prefix)
    N, d, e = 4, 192, 128
    S = prefix + L
    q = torch.randn(L, N, d, device=DEV, dtype=torch.bfloat16, generator=g)
    kv = torch.randn(S, N, d + e, device=DEV, dtype=torch.bfloat16, generator=g)
    k, v = kv[..., :d], kv[..., d:]  # strided views, as MLA's kv_b output gives them
    out = attend_cudnn(q, k, v, prefix, d ** -0.5)
    assert out.shape == (L, N, e) and out.dtype == q.dtype
    assert rel(out, _reference_attention(q, k, v, prefix, d ** -0.5)) < 2e-2


def test_router_logits_bf16_gemm_matches_float32_gemm():
    from dwdp_trtllm.engine.router import router_logits
    g = torch.Generator(device=DEV).manual_seed(5)
    x = torch.randn(777, 1024, device=DEV, dtype=torch.bfloat16, generator=g)
    w = torch.randn(64, 1024, device=DEV, dtype=torch.bfloat16, generator=g)
    got = router_logits(x, w)
    want = x.double() @ w.double().t()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)  # float32 accumulation, exact products


def _tied_rows(choice_TE: torch.Tensor, G: int, TG: int, K: int) -> torch.Tensor:
    """Rows whose selection has a float32 tie at a place that decides it: among the top TG+1 group scores or the
    top K+1 choices of the kept groups (torch.topk and the kernel may order or pick tied values differently)."""
    T, E = choice_TE.shape
    group_TG = choice_TE.view(T, G, E // G).topk(min(2, E // G), dim=-1).values.sum(-1)
    grp = group_TG.sort(-1, descending=True).values
    n = min(TG + 1, G)
    tied = (grp[:, :n - 1] == grp[:, 1:n]).any(1)
    keep = group_TG.topk(TG, dim=-1).indices
    mask = torch.zeros(T, G, dtype=torch.bool, device=choice_TE.device).scatter_(1, keep, True)
    kept = choice_TE.masked_fill(~mask.repeat_interleave(E // G, dim=1), float("-inf")).sort(-1, descending=True).values
    m = min(K + 1, E)
    return tied | (kept[:, :m - 1] == kept[:, 1:m]).any(1)


@pytest.mark.parametrize("T,E,G,TG,K", [(1, 256, 8, 4, 8), (37, 256, 8, 4, 8), (16384, 256, 8, 4, 8), (300, 64, 4, 2, 6),
                                         (50, 16, 16, 3, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_grouped_router_kernel_matches_the_eager_chain(monkeypatch, T, E, G, TG, K, bias):
    """router_cuda.py (one Triton kernel) against router.select_grouped_sigmoid's eager chain on the same CUDA
    scores: on every row without a deciding float32 tie the same experts in the same order and weights equal up
    to the order of the normalising sum; tied rows (torch.topk orders ties its own way; 2 of 16K rows at
    gaussian logits x 3 in the 2026-12-03 H200 run) are few, and there the weights are those of the kernel's own
    choice."""
    from types import SimpleNamespace

    from dwdp_trtllm.engine import router, router_cuda
    g = torch.Generator(device=DEV).manual_seed(T + E)
    logits = torch.randn(T, E, device=DEV, generator=g)
    bias_E = torch.randn(E, device=DEV, generator=g) * 0.1 if bias else None
    scores = logits.sigmoid()
    choice = scores if bias_E is None else scores + bias_E[None, :]
    clean = ~_tied_rows(choice, G, TG, K)
    assert clean.float().mean().item() > 0.99
    for norm in (True, False):
        sp = SimpleNamespace(num_experts=E, n_group=G, topk_group=TG, top_k=K, norm_topk_prob=norm,
                             routed_scaling_factor=2.5)
        ids, w = router.select_grouped_sigmoid(sp, logits, bias_E)  # the kernel (fusing is on)
        direct = router_cuda.grouped_topk_cuda(scores, bias_E, G, TG, K, norm, 2.5)
        monkeypatch.setattr(router, "fused_enabled", lambda: False)
        ids_ref, w_ref = router.select_grouped_sigmoid(sp, logits, bias_E)
        monkeypatch.undo()
        assert ids.dtype == torch.int64 and w.dtype == torch.float32 and ids.shape == (T, K)
        assert torch.equal(ids, direct[0])
        assert torch.equal(ids[clean], ids_ref[clean])
        torch.testing.assert_close(w[clean], w_ref[clean], rtol=2e-6, atol=0)
        own = scores.gather(1, ids)
        own = (own / (own.sum(-1, keepdim=True) + 1e-20) if norm else own) * 2.5
        torch.testing.assert_close(w, own, rtol=2e-6, atol=0)



def mla_outputs_cpu_and_cuda(spec, batches) -> dict[str, list[torch.Tensor]]:
    """One MLA attention layer (layer 0 of init_dense_weights(spec, 3, ...), seed-fixed weights) run over `batches`
    ([(x [T, H], segments)], in order, one KV cache) on the CPU in float32 and on CUDA in bfloat16: {"cpu": [...],
    "cuda": [...]} float32 outputs on the CPU, one [T, H] per batch (also read by test_engine_cuda)."""
    from dwdp_trtllm.engine.kv_cache import KVCache
    from dwdp_trtllm.engine.layers import make_attention, plan_segments, positions_of
    from dwdp_trtllm.engine.rope import rope_cos_sin
    from dwdp_trtllm.engine.weights import init_dense_weights

    out = {}
    for dev, dtype in (("cpu", torch.float32), ("cuda", torch.bfloat16)):
        w = {n: t.to(dev) for n, t in init_dense_weights(spec, 3, dtype, "cpu").items()}
        attn, kv = make_attention(spec, w, 0), KVCache(spec.num_layers)
        res = []
        for x, segs in batches:
            plan = plan_segments(segs, x.shape[0], kv)
            rope = rope_cos_sin(positions_of(segs, torch.device(dev)), spec)
            res.append(attn(x.to(dev, dtype), rope, plan, kv).float().cpu())
        out[dev] = res
    return out

def test_mla_attention_on_cuda_matches_the_cpu_float32_path_with_chunked_prefill():
    """One MLA attention layer's CUDA path (fused kernels, cuDNN on bucketed views of the q/k/v buffers, flash +
    lse merge for a chunk with a cached prefix) against its CPU float32 path on the same weights and inputs:
    two batches, the second continuing a request of the first from the KV cache. Attention only, so no routing
    decision can flip between the two precisions."""
    import dataclasses

    from dwdp_trtllm.engine.records import Segment
    from dwdp_trtllm.spec.models import get_model

    spec = dataclasses.replace(get_model("tiny"), qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)  # d 96, e 64
    g = torch.Generator().manual_seed(11)
    x1, x2 = torch.randn(700, spec.hidden_size, generator=g), torch.randn(300, spec.hidden_size, generator=g)
    batches = [(x1, [Segment(0, 0, 300, True), Segment(1, 0, 400, False)]), (x2, [Segment(1, 400, 300, True)])]
    out = mla_outputs_cpu_and_cuda(spec, batches)
    for got, want in zip(out["cuda"], out["cpu"]):
        assert torch.isfinite(got).all()
        assert rel(got, want) < 2e-2
