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
    SwiGLU in the same kernel, is what makes the FP8 expert phase pay."""

    q: torch.Tensor
    scale: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.q.shape

    @property
    def scale_col_major(self) -> bool:
        """The scales are stored outer-dim-major (a [A, G] view of a [G, A] buffer: DeepGEMM's MN-major layout)."""
        s = self.scale
        return s.dim() == 2 and s.stride(0) == 1 and (s.shape[1] > 1 or s.stride(1) > 1)

    def index_select(self, rows_A: torch.Tensor) -> "Fp8Rows":
        # index_select has no fp8 kernel on some devices: move the codes as bytes; outer-dim-major scales stay so
        scale = (self.scale.t().index_select(1, rows_A).t() if self.scale_col_major
                 else self.scale.index_select(0, rows_A))
        return Fp8Rows(self.q.view(torch.uint8).index_select(0, rows_A).view(self.q.dtype), scale)


#: activation quantisation group along the in-features (DeepSeek-V3 recipe: 1x128 activations, 128x128 weights)
FP8_GROUP = 128


def quantize_act_1x128(a_AD: torch.Tensor, *, scale_col_major: bool = False) -> Fp8Rows:
    """Fp8Rows of a [A, D] activation (1x128 groups). One Triton pass on CUDA when D % 128 == 0
    (engine/quant_cuda.py), the reference quantiser (ops/reference.py) otherwise. scale_col_major: the scales
    stored outer-dim-major (same values; the layout DeepGEMM reads without a transpose)."""
    if a_AD.is_cuda and a_AD.shape[1] % FP8_GROUP == 0 and fused_enabled():
        from .quant_cuda import quant_1x128
        return Fp8Rows(*quant_1x128(a_AD, scale_col_major=scale_col_major))
    q, s = quantize_fp8_blockwise(a_AD, (1, FP8_GROUP))
    if scale_col_major:  # a [A, G] view of a [G, A] buffer (strides (1, A) even where G == 1)
        s = torch.empty(s.shape[1], s.shape[0], dtype=s.dtype, device=s.device).copy_(s.t()).t()
    return Fp8Rows(q, s)
