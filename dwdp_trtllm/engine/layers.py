"""Dense building blocks of the context-phase decoder: RMSNorm, RoPE, MLA and GQA attention, SwiGLU MLP.

Shape legend: T packed tokens of this iteration, H hidden, L tokens of one segment (chunk), P cached
prefix tokens of that request, S = P + L keys, N query heads, G kv heads, d head dim,
C kv_lora_rank, R qk_rope_head_dim, Q q_lora_rank, F rope frequencies (R/2 or d/2).

A batch is a packed sequence of segments (chunks of requests). Attention is causal within a segment
and also sees the request's cached prefix (chunked prefill). Positions are absolute: segment.start + i.
Weights use the nn.Linear convention (out x in) and the HF names of weights.dense_weight_shapes. A linear layer's
weight is a tensor or an fp8_linear.Fp8Linear (FP8 block-scale codes + scales); every projection goes through
fp8_linear.linear, which runs either.
"""
from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..spec.models import ModelSpec
from . import mla_cuda
from .attention_cuda import BUCKET, attend_bucketed, attend_cudnn, causal_over_prefix, cudnn_attention_usable, prefix_as_causal
from .fp8_linear import BLOCK as FP8_BLOCK, Fp8Linear, linear, padded_rows, prepare, prepare_parts, swiglu as fp8_swiglu
from .fused import _BODIES, fused, fused_enabled
from .kv_cache import KVCache
from .records import Segment
from .rope import softmax_scale_factor
from .timing import phase

#: diagnostics only (scripts/profile_engine.py): a timer whose phase(name, layer) MLA wraps its parts in:
#: "attn.q" (x quantised, q_a, norm, q_b, RoPE), "attn.kv" (kv_a, norm, RoPE; on the cuDNN path also latents, kv_b,
#: key assembly), and on the cuDNN path only "attn.core" (the cuDNN calls), "attn.o" (o_proj's input and GEMM).
#: None in every run (the bench times phases).
PART_TIMER = None


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, computed in float32, returned in x's dtype (one Triton kernel on CUDA)."""
    return (fused("rms_norm", x) or _BODIES["rms_norm"])(x, w, eps)


def add_rms_norm(x: torch.Tensor, a: torch.Tensor, w: torch.Tensor, eps: float,
                 b: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + a, rms_norm(x + a, w)): the residual add and the next norm (one Triton kernel on CUDA). With b the
    residual gets (a + b), a + b rounded to a's dtype first (routed + shared experts), in the same pass."""
    return (fused("add_rms_norm", x) or _BODIES["add_rms_norm"])(x, a, w, eps, b)


def swiglu_mlp(x_TH: torch.Tensor, gate_w, up_w, down_w) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)): dense MLPs and shared experts; fp8_linear.swiglu runs plain and FP8 block-scale
    weights alike."""
    return fp8_swiglu(x_TH, gate_w, up_w, down_w)


# ---- RoPE ------------------------------------------------------------------------------------------
def apply_rope(x_TNd: torch.Tensor, cos_TF: torch.Tensor, sin_TF: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate x (float32 math) into a new tensor. interleaved=True rotates pairs (2i, 2i+1) (DeepSeek: HF
    de-interleaves q and k identically before rotate_half, which gives the same scores); False is NeoX
    rotate_half. A Triton kernel on CUDA (engine/fused.py), the same float32 math."""
    name = "rope_interleaved" if interleaved else "rope_neox"
    return (fused(name, x_TNd) or _BODIES[name])(x_TNd, cos_TF, sin_TF)


def apply_rope_(x_TNd: torch.Tensor, cos_TF: torch.Tensor, sin_TF: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """apply_rope written back into x (a strided view is fine): one in-place Triton kernel on CUDA
    (engine/rope_cuda.py), the eager rotation copied back elsewhere. Returns x."""
    half = x_TNd.shape[-1] // 2
    if x_TNd.is_cuda and fused_enabled() and x_TNd.stride(-1) == 1 and half and not half & (half - 1):
        from .rope_cuda import rope_
        return rope_(x_TNd, cos_TF, sin_TF, interleaved)
    return x_TNd.copy_(apply_rope(x_TNd, cos_TF, sin_TF, interleaved))


# ---- the batch's segment plan ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Where one segment sits in the packed batch and what attention must do with its cache."""

    request_id: int
    begin: int  # packed token offset
    end: int
    prefix: int  # cached tokens of this request before the chunk (== Segment.start)
    keep: bool  # store this chunk's KV for a later chunk (not the request's final chunk)


def plan_segments(segments: list[Segment], num_tokens: int, kv_cache: KVCache | None) -> list[SegmentSlice]:
    """Validate segments against the batch size and the cache; host-only (no device work)."""
    out, off = [], 0
    for i, sg in enumerate(segments):
        if sg.length <= 0 or sg.start < 0:
            raise ValueError(f"segments[{i}]: length must be > 0 and start >= 0, got {sg}")
        if sg.start or not sg.is_last:
            if kv_cache is None:
                raise ValueError(f"segments[{i}] (request {sg.request_id}) is a chunk of a longer request: pass a KVCache")
            have = kv_cache.length(sg.request_id)
            if have != sg.start:
                raise ValueError(f"segments[{i}]: request {sg.request_id} starts at token {sg.start} "
                                 f"but the KV cache holds {have} tokens of it")
        out.append(SegmentSlice(sg.request_id, off, off + sg.length, sg.start, not sg.is_last))
        off += sg.length
    if off != num_tokens:
        raise ValueError(f"segments cover {off} tokens but input_ids has {num_tokens}")
    return out


def to_device_async(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A small host tensor on `device` without stalling the host: on CUDA it is staged in pinned memory first (a copy
    from pageable memory waits for the work queued before it; PyTorch's pinned allocator keeps the staging block
    until the copy has run)."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def positions_of(segments: list[Segment], device: torch.device) -> torch.Tensor:
    """Absolute positions_T of the packed tokens (built on the host, one H2D copy from pinned memory)."""
    pos = torch.cat([torch.arange(s.start, s.start + s.length) for s in segments]) if segments else torch.empty(0, dtype=torch.int64)
    return to_device_async(pos, device)


def attend(q_LNd: torch.Tensor, k_SGd: torch.Tensor, v_SGe: torch.Tensor, prefix: int, scale: float) -> torch.Tensor:
    """Causal attention of one chunk over its cached prefix + itself: out_LNe.

    Query i (absolute position prefix + i) sees keys [0, prefix + i]. G may divide N (GQA)."""
    # [1, N, L, d]: SDPA's fused CUDA kernels (flash, mem-efficient) take 4-D inputs only; 3-D goes to math
    q, k, v = q_LNd.transpose(0, 1)[None], k_SGd.transpose(0, 1)[None], v_SGe.transpose(0, 1)[None]
    gqa = k.shape[1] != q.shape[1]
    if prefix == 0:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    else:
        L, S = q.shape[2], k.shape[2]
        mask_LS = torch.arange(S, device=q.device)[None, :] <= (prefix + torch.arange(L, device=q.device))[:, None]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask_LS, scale=scale, enable_gqa=gqa)
    return o[0].transpose(0, 1)


#: device types on which attend_packed() zero-pads v to the qk head dim: CUDA's fused attention kernels
#: (flash, varlen) want one head dim, and MLA has v 128 vs qk 192 (SDPA's math fallback would materialise
#: [N, L, S] fp32 scores: 32 GiB at 128 heads x 8K). Zero columns of v are exact: the output is sliced.
PAD_V_DEVICES = ("cuda",)


#: use torch's flash varlen kernel for packed batches on CUDA (bf16/fp16) when this torch has it
VARLEN_ATTENTION = True


@functools.cache
def _torch_varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    # torch 2.9-2.11 spell causal as window_size=(-1, 0); older previews had other signatures
    return varlen_attn if "window_size" in inspect.signature(varlen_attn).parameters else None


def _varlen_fn(q: torch.Tensor):
    if not (VARLEN_ATTENTION and q.is_cuda and q.dtype in (torch.bfloat16, torch.float16)):
        return None
    return _torch_varlen()


#: use cuDNN's SDPA per segment on CUDA (bf16/fp16, as many kv heads as q heads) when the GPU has it
CUDNN_ATTENTION = True


def _cudnn_ok(q_TNd: torch.Tensor, k_SGd: torch.Tensor) -> bool:
    return (CUDNN_ATTENTION and q_TNd.is_cuda and q_TNd.dtype in (torch.bfloat16, torch.float16)
            and k_SGd.shape[1] == q_TNd.shape[1] and cudnn_attention_usable(q_TNd.device.index or 0))


def attend_packed(q_TNd: torch.Tensor, k_list: list[torch.Tensor], v_list: list[torch.Tensor], plan: list[SegmentSlice],
                  scale: float) -> torch.Tensor:
    """Attention of every segment of the packed batch: out_TNe. k_list[i]/v_list[i] are segment i's keys
    and values [S_i, G, d]/[S_i, G, e] (cached prefix first). On CUDA: cuDNN per segment where it applies
    (MLA, and GQA without head sharing), else one flash varlen call; on the CPU a loop of SDPA calls (fp32)."""
    if not plan:  # an idle rank still runs the layers (DEP collectives)
        return q_TNd.new_empty(0, q_TNd.shape[1], v_list[0].shape[2] if v_list else q_TNd.shape[2])
    N, d, e = q_TNd.shape[1], q_TNd.shape[2], v_list[0].shape[2]
    if _cudnn_ok(q_TNd, k_list[0]):  # cuDNN per segment, v at its own head dim (attention_cuda.py)
        out = [attend_cudnn(q_TNd[s.begin:s.end], k, v, s.prefix, scale) for s, k, v in zip(plan, k_list, v_list)]
        return torch.cat(out) if len(out) > 1 else out[0]
    if e < d and q_TNd.device.type in PAD_V_DEVICES:
        v_list = [F.pad(v, (0, d - e)) for v in v_list]
    varlen = _varlen_fn(q_TNd)
    if varlen is None or len(plan) == 1 and plan[0].prefix == 0:
        out = [attend(q_TNd[s.begin:s.end], k, v, s.prefix, scale) for s, k, v in zip(plan, k_list, v_list)]
        return (torch.cat(out) if len(out) > 1 else out[0])[..., :e]
    k_SGd, v_SGe = torch.cat(k_list), torch.cat(v_list)
    if k_SGd.shape[1] != N:  # this varlen has no enable_gqa: repeat the kv heads
        k_SGd, v_SGe = k_SGd.repeat_interleave(N // k_SGd.shape[1], 1), v_SGe.repeat_interleave(N // v_SGe.shape[1], 1)
    lens_q, lens_k = [s.end - s.begin for s in plan], [k.shape[0] for k in k_list]
    cu = torch.tensor([[sum(lens_q[:i]), sum(lens_k[:i])] for i in range(len(plan) + 1)], dtype=torch.int32)
    cu = to_device_async(cu, q_TNd.device)
    # window (-1, 0) is causal aligned to the bottom right: query i of a chunk sees its prefix + keys <= i
    out = varlen(q_TNd.contiguous(), k_SGd.contiguous(), v_SGe.contiguous(), cu[:, 0].contiguous(), cu[:, 1].contiguous(),
                 max(lens_q), max(lens_k), scale=scale, window_size=(-1, 0))
    return out[..., :e]


# ---- attention blocks ------------------------------------------------------------------------------
class _Attention:
    """What both attention kinds share: their layer's weights (prefix stripped) and the per-segment cache."""

    def __init__(self, spec: ModelSpec, w: dict[str, torch.Tensor], layer: int, head_dim_for_scale: int):
        self.spec, self.layer = spec, layer
        p = f"model.layers.{layer}.self_attn."
        self.w = {k[len(p):]: v for k, v in w.items() if k.startswith(p)}
        self.scale = 1.0 / math.sqrt(head_dim_for_scale)

    def with_prefix(self, plan: list[SegmentSlice], kv_cache: KVCache | None, a_T: torch.Tensor, b_T: torch.Tensor):
        """Per segment: (a, b) of its cached prefix followed by this chunk's rows; chunks that a later chunk
        continues are appended to the cache. (a, b) is what the attention caches (MLA: latent + rope key;
        GQA: k + v)."""
        for s in plan:
            a_S, b_S = a_T[s.begin:s.end], b_T[s.begin:s.end]
            full_a, full_b = a_S, b_S
            if s.prefix:
                pa, pb = kv_cache.prefix(s.request_id, self.layer)  # type: ignore[union-attr, misc]
                full_a, full_b = torch.cat([pa, a_S]), torch.cat([pb, b_S])
            if s.keep:
                kv_cache.extend(s.request_id, self.layer, (a_S, b_S))  # type: ignore[union-attr]
            yield full_a, full_b


class MLAAttention(_Attention):
    """DeepSeek multi-head latent attention, expanded form (K/V rebuilt from the cached latent)."""

    def __init__(self, spec: ModelSpec, w: dict[str, torch.Tensor], layer: int):
        super().__init__(spec, w, layer, spec.qk_nope_head_dim + spec.qk_rope_head_dim)
        self.scale *= softmax_scale_factor(spec)  # YaRN: mscale**2 (DeepSeek's yarn_apply_mscale)

    def __call__(self, x_TH: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], plan: list[SegmentSlice],
                 kv_cache: KVCache | None) -> torch.Tensor:
        sp, w = self.spec, self.w
        T, N, Dn, R, Dv, C = x_TH.shape[0], sp.num_heads, sp.qk_nope_head_dim, sp.qk_rope_head_dim, sp.v_head_dim, sp.kv_lora_rank
        # cuDNN path: q/k/v live in buffers with BUCKET spare rows, so each chunk's causal call reads its bucketed
        # length in place (rows past the chunk are the next chunk's or zeros: only dropped queries see them)
        cudnn = bool(plan) and _cudnn_ok(x_TH.new_empty(1, N, 1), x_TH.new_empty(1, N, 1))
        pad = BUCKET if cudnn else 0
        # chunks with a prefix attended as one causal call over prefix + chunk take the prefix rows before them in
        # q_buf as dummy queries (attention_cuda.causal_over_prefix): `front` zero rows where earlier chunks are fewer
        front_of = self._front_chunks(plan, x_TH.device) if cudnn else {}
        front = max(front_of.values(), default=0)
        with phase(PART_TIMER, "attn.q", self.layer):
            x_in = prepare(x_TH, w["kv_a_proj_with_mqa.weight"])  # FP8 linears: x quantised once for q_a/q and kv_a
            q_in, q_w = ((rms_norm(linear(x_in, w["q_a_proj.weight"]), w["q_a_layernorm.weight"], sp.latent_norm_eps),
                          w["q_b_proj.weight"]) if sp.q_lora_rank else (x_in, w["q_proj.weight"]))
            # at least the FP8 kernel's padded rows, so its GEMM writes q_buf in place (no [Tp, N] output and copy)
            q_buf = torch.empty(front + max(T + pad, padded_rows(T)), N * (Dn + R), device=x_TH.device, dtype=x_TH.dtype)
            linear(q_in, q_w, out=q_buf[front:])  # rows [front, front + T) (an FP8 kernel may write padding rows after)
            if front:
                q_buf[:front].zero_()
            if pad:
                q_buf[front + T:].zero_()
            q_TNd = q_buf[front:front + T].view(T, N, Dn + R)
            apply_rope_(q_TNd[..., Dn:], *rope, interleaved=sp.rope_interleave)  # in place: no copy of the nope part
        with phase(PART_TIMER, "attn.kv", self.layer):
            kva_T = linear(x_in, w["kv_a_proj_with_mqa.weight"])
            ckv_TC = rms_norm(kva_T[:, :C], w["kv_a_layernorm.weight"], sp.latent_norm_eps)
            krope_TR = apply_rope_(kva_T[:, None, C:], *rope, interleaved=sp.rope_interleave)[:, 0]  # kva_T is ours: in place
            if cudnn:
                k_buf, v_buf, starts = self._cudnn_kv(ckv_TC, krope_TR, plan, kv_cache)
        kvb_w = w["kv_b_proj.weight"]
        if cudnn:
            q_buf_TNd = q_buf.view(q_buf.shape[0], N, Dn + R)
            with phase(PART_TIMER, "attn.core", self.layer):
                outs = [causal_over_prefix(q_buf_TNd[front + s.begin - s.prefix:], k_buf[o:], v_buf[o:], s.end - s.begin,
                                           s.prefix, self.scale) if i in front_of else
                        attend_bucketed(q_buf_TNd[front + s.begin:], k_buf[o:], v_buf[o:], s.end - s.begin, s.prefix,
                                        self.scale)
                        for i, (s, o) in enumerate(zip(plan, starts))]
            # FP8 o_proj: each chunk's output quantised into its rows of o_proj's input (no [T, N*e] concatenation)
            with phase(PART_TIMER, "attn.o", self.layer):
                return linear(prepare_parts([o.reshape(o.shape[0], N * Dv) for o in outs], w["o_proj.weight"]),
                              w["o_proj.weight"])
        k_list, v_list = [], []
        for ckv_SC, krope_SR in self.with_prefix(plan, kv_cache, ckv_TC, krope_TR):
            kv_SNe = linear(ckv_SC, kvb_w).reshape(-1, N, Dn + Dv)
            k_list.append(torch.cat([kv_SNe[..., :Dn], krope_SR[:, None, :].expand(-1, N, R)], dim=-1))
            v_list.append(kv_SNe[..., Dn:])
        o_TNe = attend_packed(q_TNd, k_list, v_list, plan, self.scale)
        return linear(o_TNe.reshape(T, N * Dv), w["o_proj.weight"])

    def _kv_b_split(self) -> tuple | None:
        """kv_b_proj's rows regrouped once: (w_kn [N*Dn, C], w_v [N*Dv, C]), each contiguous, so K's nope part and V
        come out of their own GEMMs and V lands in its attention buffer directly. FP8 block-scale weights split
        with their scales when Dn and Dv are whole 128-row blocks (DeepSeek-V3/R1: 128 and 128); else None (one
        GEMM, then the halves are copied out)."""
        if not hasattr(self, "_kvb_split"):
            sp = self.spec
            N, Dn, Dv = sp.num_heads, sp.qk_nope_head_dim, sp.v_head_dim
            kvb = self.w["kv_b_proj.weight"]
            if isinstance(kvb, Fp8Linear):
                if Dn % FP8_BLOCK or Dv % FP8_BLOCK:
                    self._kvb_split = None
                    return None
                w = kvb.w_NK.view(N, Dn + Dv, -1)
                s = kvb.scale_NbKb.view(N, (Dn + Dv) // FP8_BLOCK, -1)
                bn = Dn // FP8_BLOCK
                self._kvb_split = (
                    Fp8Linear.from_codes(w[:, :Dn].reshape(N * Dn, -1), s[:, :bn].reshape(N * Dn // FP8_BLOCK, -1)),
                    Fp8Linear.from_codes(w[:, Dn:].reshape(N * Dv, -1), s[:, bn:].reshape(N * Dv // FP8_BLOCK, -1)))
                return self._kvb_split
            w = kvb.view(N, Dn + Dv, -1)
            self._kvb_split = (w[:, :Dn].reshape(N * Dn, -1).contiguous(), w[:, Dn:].reshape(N * Dv, -1).contiguous())
        return self._kvb_split

    def _front_chunks(self, plan: list[SegmentSlice], device: torch.device) -> dict[int, int]:
        """{segment index: dummy rows it needs before q row 0} for the chunks with a cached prefix that attend as one
        causal call over prefix + chunk (attention_cuda.prefix_as_causal): max(0, prefix - begin) each."""
        sp = self.spec
        d, e = sp.qk_nope_head_dim + sp.qk_rope_head_dim, sp.v_head_dim
        return {i: max(0, s.prefix - s.begin) for i, s in enumerate(plan)
                if prefix_as_causal(s.end - s.begin, s.prefix, d, e, device.index or 0)}

    def _latents(self, plan: list[SegmentSlice], kv_cache: KVCache | None, ckv_TC: torch.Tensor, krope_TR: torch.Tensor):
        """(ckv_SC, krope_SR, starts): every segment's cached prefix latents followed by its own, all segments in one
        [S_all, ...] tensor, and the row where each segment's keys start. One concatenation of the pieces (none when
        no segment has a cached prefix: the chunks' rows are the iteration's own rows, in order); chunks that a later
        chunk continues are appended to the cache."""
        pieces, starts, off = [], [], 0
        for s in plan:
            starts.append(off)
            if s.prefix:
                pieces.append(kv_cache.prefix(s.request_id, self.layer))  # type: ignore[union-attr]
                off += pieces[-1][0].shape[0]
            a_S, b_S = ckv_TC[s.begin:s.end], krope_TR[s.begin:s.end]
            if s.keep:
                kv_cache.extend(s.request_id, self.layer, (a_S, b_S))  # type: ignore[union-attr]
            pieces.append((a_S, b_S))
            off += s.end - s.begin
        if off == ckv_TC.shape[0]:  # no prefix: the segments tile the iteration's rows
            return ckv_TC, krope_TR, starts
        return torch.cat([a for a, _ in pieces]), torch.cat([b for _, b in pieces]), starts

    def _cudnn_kv(self, ckv_TC, krope_TR, plan, kv_cache) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """(k_buf, v_buf, starts): k / v of all segments (cached prefix first) written once into buffers with BUCKET
        spare rows (zeros), and the row where each segment's keys start. Each chunk then attends on views of them
        (attention_cuda.attend_bucketed, or causal_over_prefix with the prefix rows before the chunk in MLA's q
        buffer): no padding copies.

        All segments' latents go through one GEMM per output: V straight into v_buf, K's nope part into a
        temporary that one kernel (mla_cuda.py, with the rope key broadcast over heads) writes into k_buf."""
        sp = self.spec
        N, Dn, R, Dv = sp.num_heads, sp.qk_nope_head_dim, sp.qk_rope_head_dim, sp.v_head_dim
        ckv_SC, krope_SR, starts = self._latents(plan, kv_cache, ckv_TC, krope_TR)
        S_all = ckv_SC.shape[0]
        split = self._kv_b_split()
        k_buf = torch.empty(S_all + BUCKET, N, Dn + R, device=ckv_TC.device, dtype=krope_TR.dtype)
        v_buf = torch.empty(S_all + BUCKET, N, Dv, device=ckv_TC.device, dtype=krope_TR.dtype)
        if split is not None:
            w_kn, w_v = split
            c_in = prepare(ckv_SC, w_v)  # FP8 linears: the latents quantised once for both GEMMs
            linear(c_in, w_v, out=v_buf.view(S_all + BUCKET, N * Dv))  # rows [0, S_all) (+ FP8 padding rows)
            k_nope = linear(c_in, w_kn).view(S_all, N, Dn)
        else:
            kv_SNe = linear(ckv_SC, self.w["kv_b_proj.weight"]).reshape(S_all, N, Dn + Dv)
            v_buf[:S_all].copy_(kv_SNe[..., Dn:])
            k_nope = kv_SNe[..., :Dn]
        k_buf[S_all:].zero_()
        v_buf[S_all:].zero_()
        if k_buf.is_cuda and fused_enabled() and mla_cuda.usable(Dn, R):  # one Triton pass (cat's broadcast path is slow)
            mla_cuda.mla_key_(k_buf[:S_all], k_nope, krope_SR)
        else:
            torch.cat([k_nope, krope_SR[:, None, :].expand(S_all, N, R)], dim=-1, out=k_buf[:S_all])
        return k_buf, v_buf, starts


class GQAAttention(_Attention):
    """Grouped-query attention with optional q/k RMSNorm (Qwen3: per head; OLMoE: whole projection)."""

    def __init__(self, spec: ModelSpec, w: dict[str, torch.Tensor], layer: int):
        super().__init__(spec, w, layer, spec.head_dim)

    def __call__(self, x_TH: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], plan: list[SegmentSlice],
                 kv_cache: KVCache | None) -> torch.Tensor:
        sp, w = self.spec, self.w
        T, N, G, d = x_TH.shape[0], sp.num_heads, sp.num_kv_heads, sp.head_dim
        x_in = prepare(x_TH, w["q_proj.weight"])  # FP8 linears: x quantised once for q, k and v
        q, k, v = (linear(x_in, w[n + "_proj.weight"]) for n in "qkv")
        if sp.qk_norm and sp.family == "olmoe":
            q, k = rms_norm(q, w["q_norm.weight"], sp.rms_eps), rms_norm(k, w["k_norm.weight"], sp.rms_eps)
        q_TNd, k_TGd, v_TGd = q.reshape(T, N, d), k.reshape(T, G, d), v.reshape(T, G, d)
        if sp.qk_norm and sp.family != "olmoe":
            q_TNd, k_TGd = rms_norm(q_TNd, w["q_norm.weight"], sp.rms_eps), rms_norm(k_TGd, w["k_norm.weight"], sp.rms_eps)
        q_TNd, k_TGd = apply_rope_(q_TNd, *rope, interleaved=False), apply_rope_(k_TGd, *rope, interleaved=False)
        kv = list(self.with_prefix(plan, kv_cache, k_TGd, v_TGd))
        k_list, v_list = [k for k, _ in kv], [v for _, v in kv]
        o_TNd = attend_packed(q_TNd, k_list, v_list, plan, self.scale)
        return linear(o_TNd.reshape(T, N * d), w["o_proj.weight"])


def make_attention(spec: ModelSpec, w: dict[str, torch.Tensor], layer: int) -> MLAAttention | GQAAttention:
    return MLAAttention(spec, w, layer) if spec.attention == "mla" else GQAAttention(spec, w, layer)


def rope_dim(spec: ModelSpec) -> int:
    return spec.qk_rope_head_dim if spec.attention == "mla" else spec.head_dim
