"""Torch reference of dwdp::grouped_gemm (float32/float64, a loop over experts) and FP8 block dequantisation.

Legend: T tokens sorted by expert, E experts, K in, N out, KB = ceil(K/128), NB = ceil(N/128).
Reads offs and the expert maps on the host (syncs): a reference for tests and fallbacks, not a fast path.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

FP8_BLOCK = 128


def dequantize_fp8_blockwise(x: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (FP8_BLOCK, FP8_BLOCK),
                             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [..., R, C] (any float dtype, usually float8_e4m3fn) times scale [..., ceil(R/br), ceil(C/bc)] per block.

    Activation groups of 1x128 use block=(1, 128); DeepSeek weight blocks use (128, 128).
    """
    br, bc = block
    R, C = x.shape[-2], x.shape[-1]
    full = scale.to(dtype).repeat_interleave(br, dim=-2).repeat_interleave(bc, dim=-1)[..., :R, :C]
    return x.to(dtype) * full


def grouped_gemm_reference(a: torch.Tensor, offs: torch.Tensor, weights: Sequence[torch.Tensor],
                           expert_buffer_idx: torch.Tensor, expert_row: torch.Tensor,
                           a_scale: torch.Tensor | None = None, weight_scales: Sequence[torch.Tensor] | None = None,
                           *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """out_TN[rows of e] = a[rows of e] @ weights[bidx[e]][row[e]]^T in `dtype`; rows past offs[-1] are zero."""
    T, K = a.shape
    N = weights[0].shape[1]
    out = torch.zeros(T, N, dtype=dtype, device=a.device)
    fp8 = a_scale is not None
    a_f = dequantize_fp8_blockwise(a, a_scale, (1, FP8_BLOCK), dtype) if fp8 else a.to(dtype)
    start = 0
    for e, (end, b, r) in enumerate(zip(offs.tolist(), expert_buffer_idx.tolist(), expert_row.tolist())):
        if end > start:
            w = weights[b][r]
            w_f = dequantize_fp8_blockwise(w, weight_scales[b][r], (FP8_BLOCK, FP8_BLOCK), dtype) if fp8 else w.to(dtype)
            out[start:end] = a_f[start:end] @ w_f.T
        start = end
    return out


def quantize_fp8_blockwise(x: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., R, C] float -> (e4m3 [..., R, C], fp32 scale [..., ceil(R/br), ceil(C/bc)]), amax/448 per block.

    R and C must be multiples of the block (true for the DeepSeek shapes and the tests)."""
    br, bc = block
    *lead, R, C = x.shape
    if R % br or C % bc:
        raise ValueError(f"quantize_fp8_blockwise: shape {tuple(x.shape)} is not a multiple of block {block}")
    xb = x.float().reshape(*lead, R // br, br, C // bc, bc)
    amax = xb.abs().amax(dim=(-3, -1), keepdim=True).clamp(min=1e-12)
    scale = amax / 448.0
    q = (xb / scale).to(torch.float8_e4m3fn).reshape(*lead, R, C)
    return q, scale.reshape(*lead, R // br, C // bc).contiguous()
