"""The routed experts' FP8 block-scale GEMMs through DeepGEMM (deepseek-ai/DeepGEMM, ops/deepgemm.py): the fastest
Hopper FP8 grouped-GEMM mainloop measured here (docs/BENCHMARKS.md, "Routed-expert op"), run over the weights where
they lie: one [E, ...] buffer (DEP, the composite view) or a DWDP rank's [local | slot] buffers, no merge copy.

DeepGEMM groups rows along M over ONE [G, N, K] weight tensor; it cannot read per-expert pointers. routed_mlp sorts the
token-expert pairs buffer-major (section_rows), so each buffer's rows form one contiguous section of the padded rows,
and calls DeepGEMM once per buffer on its section (weights in place). What it runs (routed_mlp's docstring has the
passes): one 1x128 quantisation of the T token rows, one gather to the padded rows, per buffer fc1, SwiGLU +
quantisation, fc2; then moe_compute.combine reads the padded output through dest_A (one deterministic pass).

Who runs it: gemm: deepgemm always (DeepGEMM required); gemm: multi_buffer and composite_view with FP8 experts on
sm_90 when DWDP_MOE_MAINLOOP asks for it (auto, deepgemm; the default, cutlass, runs dwdp::grouped_gemm, our CUTLASS
kernels) and DeepGEMM is built (`usable` says why not otherwise; then ours run, with one warning). deepgemm_gemm is
the GemmFn contract on unpadded rows (grouped_gemm / expert_mlp callers): it pads and unpads around the GEMM (a host
sync for the exact height; correct, slower).

Shape legend: T tokens, A sorted pairs, M padded rows, E experts, V groups over all buffers (sum of their rows),
B buffers, H hidden, I intermediate, N out, K in.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..ops import deepgemm as dgl
from .expert_maps import is_identity
from .fp8_rows import Fp8Rows, quantize_act_1x128

FP8 = torch.float8_e4m3fn
#: m_indices (True: psum) layout: m_indices was the faster one at 16K+ tokens in 7 of 8 points of section 13
USE_PSUM = False


def check_one_buffer(what: str, weights: list[torch.Tensor], scales: list[torch.Tensor] | None,
                     buf_idx_E: torch.Tensor, row_E: torch.Tensor, identity: bool | None = None) -> None:
    """ValueError naming gemm='deepgemm', `what` and why, unless weights are one FP8 [E, N, K] buffer with scales
    and expert e at row e. identity: the caller knows whether the map is the identity; None: identity_map's own
    tensors are recognised (expert_maps.is_identity, no host sync), other maps are compared by value (a host sync)."""
    if len(weights) != 1:
        raise ValueError(f"gemm='deepgemm' ({what}) takes one [E, N, K] buffer, got {len(weights)}: DeepGEMM's grouped "
                         "GEMM reads one weight tensor, not per-expert pointers; use gemm='multi_buffer' for a "
                         "[local | slot] split, or the composite view (one [E, ...] VMM range)")
    w = weights[0]
    if w.dtype != FP8 or not scales or len(scales) != 1:
        raise ValueError(f"gemm='deepgemm' ({what}) takes FP8 block-scale weights (float8_e4m3fn + one 128x128 FP32 "
                         f"scale tensor), got {w.dtype} with {0 if not scales else len(scales)} scale tensors")
    E = buf_idx_E.shape[0]
    if identity is None:
        identity = is_identity(buf_idx_E, row_E) or (bool((buf_idx_E == 0).all())
                                                     and torch.equal(row_E.long().cpu(), torch.arange(E)))
    if w.shape[0] != E or not identity:
        raise ValueError(f"gemm='deepgemm' ({what}) needs expert e at row e of the one buffer (identity_map): the "
                         f"buffer holds {w.shape[0]} rows for {E} experts, identity map: {identity}")


def _gemm_padded(a_M: Fp8Rows, w_ENK: torch.Tensor, sw: torch.Tensor, lay: dgl.PaddedLayout) -> torch.Tensor:
    """[M, N] bf16 on the padded rows; MN-major TMA-aligned scales are taken as they are."""
    return dgl.grouped_gemm_fp8_padded(a_M.q, dgl.transform_activation_scales(a_M.scale), w_ENK, sw, lay,
                                       use_psum=USE_PSUM)


#: (rows_B, device) -> (base_B, last_B) int64 on that device: built once. A tensor made from host values per call is a
#: pageable host-to-device copy, which waits for everything queued on the stream (a full sync per MoE layer).
_SECTION_CONSTANTS: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _section_constants(rows_B: tuple[int, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(base_B: first group of buffer b in the buffer-major order, last_B: its last group), cached per device."""
    key = (rows_B, str(device))
    if key not in _SECTION_CONSTANTS:
        ends = torch.tensor(rows_B, dtype=torch.int64).cumsum(0)
        _SECTION_CONSTANTS[key] = ((ends - torch.tensor(rows_B)).to(device), (ends - 1).to(device))
    return _SECTION_CONSTANTS[key]


#: the section heights of a [local | slot] split are read back once per call (a host wait on the sort, not a device
#: stall: the quantisation and the gather are queued behind it); see routed_mlp
def section_rows(buf_idx_E: torch.Tensor, row_E: torch.Tensor, rows_B: tuple[int, ...]) -> torch.Tensor:
    """virt_E int64: expert e's group in the buffer-major order of its weights, base[buffer e] + row e (base[b] = rows
    of the buffers before b). Sorting pairs by it lays the rows out buffer by buffer, each buffer's rows by its row
    order: one DeepGEMM call per buffer then reads that buffer's weights in place (no merge copy)."""
    base_B, _ = _section_constants(rows_B, buf_idx_E.device)
    return base_B[buf_idx_E.long()] + row_E.long()


def _sort(ids_TK: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(perm_A stable by group, offs_G int32 cumulative ends): moe_compute.sort_by_expert's order (no host sync)."""
    flat_A = ids_TK.reshape(-1)
    counts_G = torch.zeros(groups, dtype=torch.int64, device=flat_A.device)
    counts_G.scatter_add_(0, flat_A, torch.ones_like(flat_A))
    return torch.sort(flat_A, stable=True).indices, counts_G.cumsum(0).to(torch.int32)


def usable(w13_sources: list[torch.Tensor], w13_scale_sources: list[torch.Tensor] | None,
           w2_sources: list[torch.Tensor]) -> str | None:
    """None when routed_mlp can run these experts on this device, else why not (one phrase)."""
    w = w13_sources[0]
    if not w.is_cuda:
        return "not on a CUDA device"
    if w.dtype != FP8 or not w13_scale_sources:
        return f"{w.dtype} experts (DeepGEMM's path takes FP8 block scales)"
    if torch.cuda.get_device_capability(w.device)[0] != 9:
        return "not an sm_90 GPU"
    N2, K = w.shape[1], w.shape[2]
    if N2 % 256 or K % 128 or w2_sources[0].shape[1] % 128:
        return f"expert dims {tuple(w.shape[1:])} not multiples of DeepGEMM's 128-wide blocks"
    if not dgl.available():
        return "DeepGEMM is not built (dwdp build-ops --deepgemm)"
    return None


def routed_mlp(x_TH: torch.Tensor, topk_ids_TK: torch.Tensor, w13_sources: list[torch.Tensor],
               w2_sources: list[torch.Tensor], buf_idx_E: torch.Tensor, row_E: torch.Tensor, *,
               w13_scale_sources: list[torch.Tensor], w2_scale_sources: list[torch.Tensor], up_first: bool,
               act: Callable[..., Fp8Rows]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The routed experts' MLP over any number of weight buffers ([local | slot] or one [E, ...]) on DeepGEMM:
    (y_MH bf16 padded, perm_A, dest_A int64: the padded row of sorted pair a). The combine reads y through dest_A.

    Pairs are sorted by section_rows (buffer-major), laid out in DeepGEMM's padded rows (each group from a multiple of
    ALIGN_M, padded_layout), so buffer b's rows are one contiguous section [S_b, S_b + h_b). Then
      1. x's T rows quantised 1x128 once; ONE gather (8-byte words) writes every padded row of the codes; the scales
         of each section gathered outer-dim-major (DeepGEMM's layout, taken as is);
      2. per buffer: fc1 on its section (its weights read in place), SwiGLU + 1x128 quantisation (act, one Triton
         pass, scales outer-dim-major), fc2 into the section of y.
    One buffer: S_0 = 0 and the height is padded_height(A, E) (no host sync). Several: the section heights are read
    back once (one small copy, its wait on the host only: the quantisation and the gather are already queued behind
    it); no other host value is made or read (the section constants are built once per device, _section_constants).
    Every real row sees the arithmetic of gemm multi_buffer (same quantiser, SwiGLU kernel and combine) with
    DeepGEMM's GEMM (bit-equal to ours, docs/BENCHMARKS.md). Streams: everything on the current stream."""
    T, K = topk_ids_TK.shape
    rows_B = tuple(int(w.shape[0]) for w in w13_sources)
    V = sum(rows_B)
    virt_E = section_rows(buf_idx_E, row_E, rows_B)
    perm_A, offs_V = _sort(virt_E[topk_ids_TK.long()], V)
    A = perm_A.shape[0]
    rows_A = torch.div(perm_A, K, rounding_mode="floor")
    lay = dgl.padded_layout(offs_V, rows=A, rows_padded=dgl.padded_height(A, V))
    if len(rows_B) == 1:
        starts, heights = [0], [lay.rows_padded]
    else:
        ends_V = offs_V.to(torch.int64)
        aligned_V = (torch.diff(ends_V, prepend=ends_V.new_zeros(1)) + dgl.ALIGN_M - 1) // dgl.ALIGN_M * dgl.ALIGN_M
        sec_end_B = aligned_V.cumsum(0)[_section_constants(rows_B, x_TH.device)[1]]
        on_gpu = x_TH.is_cuda
        sec_end_host = torch.empty(len(rows_B), dtype=torch.int64, pin_memory=on_gpu)
        sec_end_host.copy_(sec_end_B, non_blocking=on_gpu)
        done = torch.cuda.Event() if on_gpu else None
        if done is not None:
            done.record()
    # The quantisation and the gather need no host value (the gather covers the whole padded height): both are queued
    # before the host waits for the section heights, so the GPU has them to run while the host launches the GEMMs.
    x_T = quantize_act_1x128(x_TH)  # T rows, row-major scales
    src_P = dgl.padded_source_rows(rows_A, lay)  # [lay.rows_padded]
    q_P = dgl._as_words(x_T.q.view(torch.uint8)).index_select(0, src_P).view(torch.uint8).view(FP8)
    if len(rows_B) > 1:
        if done is not None:
            done.synchronize()
        ends = sec_end_host.tolist()
        starts, heights = [0, *ends[:-1]], [e - s for s, e in zip([0, *ends[:-1]], ends)]
    M = starts[-1] + heights[-1]
    src_M = src_P[:M]
    q_M = q_P.view(lay.rows_padded, -1)[:M]
    sT_GT = x_T.scale.t()
    N13, H = w13_sources[0].shape[1], w2_sources[0].shape[1]
    h_M = torch.empty(M, N13, dtype=torch.bfloat16, device=x_TH.device)
    y_MH = torch.empty(M, H, dtype=torch.bfloat16, device=x_TH.device)
    base = 0
    for b, (S, h) in enumerate(zip(starts, heights)):
        if h:
            sec = _section_layout(lay, S, h, base, rows_B[b])
            sa = sT_GT.index_select(1, src_M[S:S + h]).t()  # [h, G] outer-dim-major
            dgl.grouped_gemm_fp8_padded(q_M[S:S + h], sa, w13_sources[b], w13_scale_sources[b], sec,
                                        out_MN=h_M[S:S + h], use_psum=USE_PSUM)
            a = act(h_M[S:S + h], up_first, scale_col_major=True)
            dgl.grouped_gemm_fp8_padded(a.q, a.scale, w2_sources[b], w2_scale_sources[b], sec,
                                        out_MN=y_MH[S:S + h], use_psum=USE_PSUM)
        base += rows_B[b]
    return y_MH, perm_A, lay.dest_R


def _section_layout(lay: "dgl.PaddedLayout", S: int, h: int, base: int, rows: int) -> "dgl.PaddedLayout":
    """The layout DeepGEMM takes for section [S, S + h) of lay over buffer rows [base, base + rows): group indices
    relative to the buffer, row ends relative to S."""
    m_M = lay.m_indices_M[S:S + h]
    return dgl.PaddedLayout(dest_R=lay.dest_R, expert_R=lay.expert_R,
                            m_indices_M=torch.where(m_M >= 0, m_M - base, m_M),
                            psum_E=(lay.psum_E[base:base + rows] - S).clamp_(min=0).to(torch.int32), rows_padded=h)


def deepgemm_gemm(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    """The GemmFn contract (moe_compute) on unpadded rows: pad, DeepGEMM, unpad (ops/deepgemm.grouped_gemm_fp8)."""
    check_one_buffer("grouped_gemm", weights, scales, buf_idx_E, row_E)
    a = a_AD if isinstance(a_AD, Fp8Rows) else quantize_act_1x128(a_AD)
    out = dgl.grouped_gemm_fp8(a.q, offs_E, weights[0], a.scale.contiguous(), scales[0], use_psum=USE_PSUM)
    return out if isinstance(a_AD, Fp8Rows) else out.to(a_AD.dtype)
