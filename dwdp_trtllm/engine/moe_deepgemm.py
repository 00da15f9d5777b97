"""gemm: deepgemm: the routed experts' FP8 block-scale GEMMs through DeepGEMM (`m_grouped_fp8_gemm_nt_contiguous`,
ops/deepgemm.py), opt-in (issue 25; docs/history/benchmarks-2026-12.md section 13: 1.10-1.27x faster than our kernel at 16K+ tokens,
bit-identical outputs, but a separate pad/unpad pass ate the gain).

DeepGEMM reads ONE [E, N, K] weight tensor with expert e at row e (DEP's buffer, the single-rank engine, the VMM
composite view): it cannot read per-expert pointers, so a [local | slot] split is refused with a ValueError naming
the gemm and why (as gemm: composite_view refuses it), and so is a single buffer whose expert map is not the
identity_map. Weights must be FP8 (e4m3 + 128x128 FP32 scales); BF16 weights are refused.

padded_mlp is what routed_experts_forward runs (no pad or unpad pass): with M = padded_height(A, E) (no host sync)
  1. the gather writes each sorted row straight to its padded row: the T token rows quantised 1x128 once, then ONE
     index_select by padded_source_rows (padding rows read token row 0: real numbers, never read into an output);
     scales gathered outer-dim-major, the layout DeepGEMM takes as is (no transpose kernel);
  2. fc1 on the M padded rows (m_indices: -1 on padding rows, whose output DeepGEMM leaves undefined);
  3. SwiGLU + 1x128 quantisation over all M rows (wasted on padding rows, harmless: row-wise);
  4. fc2 on the M padded rows;
  5. the combine reads row dest_A[a] for sorted pair a (moe_compute.combine y_rows_A).
Real rows see exactly the multi_buffer path's arithmetic (the same quantiser, the same SwiGLU kernel, the same
combine kernel, and DeepGEMM's GEMM output equals ours bit for bit, section 13).
deepgemm_gemm is the GemmFn contract on unpadded rows (grouped_gemm / expert_mlp callers: DWDP's and DEP's
backends): it pads and unpads around the GEMM (a host sync for the exact height; correct, slower).

Shape legend: T tokens, A sorted pairs, M padded rows, E experts, H hidden, I intermediate, N out, K in.
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


def padded_mlp(x_TH: torch.Tensor, rows_A: torch.Tensor, offs_E: torch.Tensor, w13_sources: list[torch.Tensor],
               w2_sources: list[torch.Tensor], buf_idx_E: torch.Tensor, row_E: torch.Tensor, *,
               w13_scale_sources: list[torch.Tensor] | None, w2_scale_sources: list[torch.Tensor] | None,
               up_first: bool, act: Callable[..., Fp8Rows], identity: bool | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(y_MH bf16 padded, dest_A int64: the padded row of sorted pair a). rows_A: token row of each expert-sorted pair;
    offs_E: int32 cumulative ends; act: moe_compute.silu_mul_quant (passed in: this module imports nothing of
    moe_compute). No host sync when identity is given or the maps are identity_map's tensors (check_one_buffer)."""
    check_one_buffer("w13", w13_sources, w13_scale_sources, buf_idx_E, row_E, identity)
    check_one_buffer("w2", w2_sources, w2_scale_sources, buf_idx_E, row_E, True)  # the same map: checked once
    A, E = rows_A.shape[0], buf_idx_E.shape[0]
    lay = dgl.padded_layout(offs_E, rows=A, rows_padded=dgl.padded_height(A, E))
    x_M = quantize_act_1x128(x_TH, scale_col_major=True).index_select(dgl.padded_source_rows(rows_A, lay))
    h_M2I = _gemm_padded(x_M, w13_sources[0], w13_scale_sources[0], lay)
    y_MH = _gemm_padded(act(h_M2I, up_first, scale_col_major=True), w2_sources[0], w2_scale_sources[0], lay)
    return y_MH, lay.dest_R


def deepgemm_gemm(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    """The GemmFn contract (moe_compute) on unpadded rows: pad, DeepGEMM, unpad (ops/deepgemm.grouped_gemm_fp8)."""
    check_one_buffer("grouped_gemm", weights, scales, buf_idx_E, row_E)
    a = a_AD if isinstance(a_AD, Fp8Rows) else quantize_act_1x128(a_AD)
    out = dgl.grouped_gemm_fp8(a.q, offs_E, weights[0], a.scale.contiguous(), scales[0], use_psum=USE_PSUM)
    return out if isinstance(a_AD, Fp8Rows) else out.to(a_AD.dtype)
