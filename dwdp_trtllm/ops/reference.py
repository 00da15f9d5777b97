"""Torch reference of dwdp::grouped_gemm (float32/float64, a loop over experts) and FP8 block dequantisation.

Legend: T tokens sorted by expert, E experts, K in, N out, KB = ceil(K/128), NB = ceil(N/128).
Reads offs and the expert maps on the host (syncs): a reference for tests and fallbacks, not a fast path.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

FP8_BLOCK = 128
FP8_MAX = 448.0  # largest finite float8_e4m3fn


def dequantize_fp8_blockwise(x: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (FP8_BLOCK, FP8_BLOCK),
                             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x [..., R, C] (any float dtype, usually float8_e4m3fn) times scale [..., ceil(R/br), ceil(C/bc)] per block.

    Activation groups of 1x128 use block=(1, 128); DeepSeek weight blocks use (128, 128). The product is
    formed in at least float32 and then cast to `dtype`.
    """
    br, bc = block
    R, C = x.shape[-2], x.shape[-1]
    work = torch.promote_types(dtype, torch.float32)
    full = scale.to(work).repeat_interleave(br, dim=-2)[..., :R, :].repeat_interleave(bc, dim=-1)[..., :C]
    return (x.to(work) * full).to(dtype)


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

    The one FP8 block quantiser of the package: DeepSeek 128x128 weight blocks (block=(128, 128)) and
    1x128 activation groups (block=(1, 128)). Sizes off the block are zero-padded for the amax.
    """
    br, bc = block
    *lead, R, C = x.shape
    nb, kb = -(-R // br), -(-C // bc)
    xp = torch.nn.functional.pad(x.float(), (0, kb * bc - C, 0, nb * br - R))
    xb = xp.reshape(*lead, nb, br, kb, bc)
    scale = xb.abs().amax(dim=(-3, -1), keepdim=True).clamp_min(1e-12) / FP8_MAX
    q = (xb / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).reshape(*lead, nb * br, kb * bc)
    return q[..., :R, :C].contiguous(), scale.reshape(*lead, nb, kb).contiguous()
