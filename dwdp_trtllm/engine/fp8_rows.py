"""Activation rows quantised for an FP8 GEMM path (1x128 groups, the DeepSeek-V3 recipe) and the quantiser.

Shared by moe_compute.py (the caller that quantises once per token) and gemm_paths.py (the plugin paths that
take them), so that neither imports the other for it. Shape legend: A rows, D in features, G = D / 128.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.reference import quantize_fp8_blockwise
from .fused import fused_enabled


@dataclass(frozen=True, slots=True)
class Fp8Rows:
    """Activation rows already quantised for an FP8 GEMM path: q_AD float8_e4m3fn, scale_AG float32 with
    a ~= q * scale per 1x128 group (G = D / 128). Quantising once, before the rows are gathered or after the
    SwiGLU in the same kernel, is what makes the FP8 expert phase pay (issue 14)."""

    q: torch.Tensor
    scale: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.q.shape

    def index_select(self, rows_A: torch.Tensor) -> "Fp8Rows":
        # index_select has no fp8 kernel on some devices: move the codes as bytes
        return Fp8Rows(self.q.view(torch.uint8).index_select(0, rows_A).view(self.q.dtype), self.scale.index_select(0, rows_A))


#: activation quantisation group along the in-features (DeepSeek-V3 recipe: 1x128 activations, 128x128 weights)
FP8_GROUP = 128


def quantize_act_1x128(a_AD: torch.Tensor) -> Fp8Rows:
    """Fp8Rows of a [A, D] activation (1x128 groups). One Triton pass on CUDA when D % 128 == 0
    (engine/quant_cuda.py), the reference quantiser (ops/reference.py) otherwise."""
    if a_AD.is_cuda and a_AD.shape[1] % FP8_GROUP == 0 and fused_enabled():
        from .quant_cuda import quant_1x128
        return Fp8Rows(*quant_1x128(a_AD))
    return Fp8Rows(*quantize_fp8_blockwise(a_AD, (1, FP8_GROUP)))
