"""Plugin GEMM paths for the engine's MoE: 'multi_buffer' = the dwdp::grouped_gemm op (ops/);
'composite_view' = a stock grouped GEMM (torch._grouped_mm) on one [E, N, K] VMM view of local +
prefetched experts (composite_slots.py), the op with that single buffer for fp8 block scales.

Registered into moe_compute.GEMM_PATHS on first use of such a name (moe_compute imports this lazily),
so the engine runs without the C++ op until a config asks for it. FP8 weights (128x128 block scales)
take FP8 activations quantised here in 1x128 groups (DeepSeek-V3 recipe); the op returns bf16.

Shape legend: A token-expert rows, D in features, N out features, G = ceil(D/128) groups.
"""
from __future__ import annotations

import torch

from ..ops import grouped_gemm
from ..ops.reference import quantize_fp8_blockwise
from .fused import fused
from .moe_compute import GEMM_PATHS, register_gemm

GROUP = 128


def quantize_act_1x128(a_AD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_fp8 [A, D] e4m3, scale_AG fp32 [A, ceil(D/128)]) with a ~= a_fp8 * scale per 1x128 group.
    One fused pass on CUDA when D % 128 == 0 (engine/fused.py), the reference quantiser otherwise."""
    fn = fused("quant_1x128", a_AD) if a_AD.shape[1] % GROUP == 0 else None
    return fn(a_AD) if fn is not None else quantize_fp8_blockwise(a_AD, (1, GROUP))


def _multi_buffer(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    buf_idx_E, row_E, offs_E = buf_idx_E.to(torch.int32), row_E.to(torch.int32), offs_E.to(torch.int32)
    if scales is None:
        return grouped_gemm(a_AD, offs_E, weights, buf_idx_E, row_E)
    a_q, a_scale = quantize_act_1x128(a_AD)
    return grouped_gemm(a_q, offs_E, weights, buf_idx_E, row_E, a_scale, scales).to(a_AD.dtype)


def _composite_view(a_AD, offs_E, weights, buf_idx_E, row_E, scales=None):
    if len(weights) != 1:
        raise ValueError(f"gemm='composite_view' takes one [E, N, K] view, got {len(weights)} buffers")
    if scales is not None:
        return _multi_buffer(a_AD, offs_E, weights, buf_idx_E, row_E, scales)
    # the expert map is the identity by construction: the view is in expert order
    return torch._grouped_mm(a_AD, weights[0].transpose(1, 2), offs=offs_E.to(torch.int32))


def ensure_registered() -> None:
    if "multi_buffer" not in GEMM_PATHS:
        register_gemm("multi_buffer", _multi_buffer, supports_fp8=True)
    if "composite_view" not in GEMM_PATHS:
        register_gemm("composite_view", _composite_view, supports_fp8=True)
