"""Rotary position embedding tables: plain rope and YaRN, computed as HF transformers computes them.

Shape legend: T tokens, F rope frequencies (rotary dim / 2).

The reference is transformers' modeling_rope_utils (`_compute_default_rope_parameters`,
`_compute_yarn_parameters`) and modeling_deepseek_v3 (`yarn_get_mscale`, `yarn_apply_mscale`):
- inv_freq_F = 1 / theta**(2i/d) (float32, on the CPU, then moved), the same expression HF evaluates;
- YaRN blends extrapolated (1/theta**(2i/d)) and interpolated (that / factor) frequencies with a linear
  ramp between the dims that rotate beta_fast and beta_slow times over original_max_position_embeddings;
- cos/sin are multiplied by the attention factor (mscale(factor, mscale) / mscale(factor, mscale_all_dim),
  1.0 for DeepSeek-V3's release config);
- MLA (DeepSeek) multiplies the softmax scale by mscale(factor, mscale_all_dim)**2 (`softmax_scale_factor`).
Tables are built once per (spec, device) (`inv_freq`, cached) and once per forward for the batch's
positions (`rope_cos_sin`): no per-layer or per-token Python work.
"""
from __future__ import annotations

import functools
import math

import torch

from ..spec.models import ModelSpec, YarnScaling


def rope_dim(spec: ModelSpec) -> int:
    """Rotary dims of one head: qk_rope_head_dim (MLA) or head_dim (GQA)."""
    return spec.qk_rope_head_dim if spec.attention == "mla" else spec.head_dim


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """0.1 * mscale * ln(scale) + 1 for scale > 1, else 1 (DeepSeek's yarn_get_mscale)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(y: YarnScaling, dim: int, base: float) -> torch.Tensor:
    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(y.original_max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(y.beta_fast), correction_dim(y.beta_slow)
    if y.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF: prevent a zero-width ramp
    ramp_F = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs_F = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation_F, interpolation_F = 1.0 / pos_freqs_F, 1.0 / (y.factor * pos_freqs_F)
    extra_factor_F = 1 - ramp_F
    return interpolation_F * (1 - extra_factor_F) + extrapolation_F * extra_factor_F


def attention_factor(spec: ModelSpec) -> float:
    """Factor on cos and sin (1.0 without rope scaling)."""
    y = spec.rope_scaling
    if y is None:
        return 1.0
    if y.attention_factor is not None:
        return float(y.attention_factor)
    if y.mscale and y.mscale_all_dim:
        return float(yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim))
    return yarn_mscale(y.factor)


def softmax_scale_factor(spec: ModelSpec) -> float:
    """Factor on MLA's 1/sqrt(qk_head_dim): mscale(factor, mscale_all_dim)**2 under YaRN with mscale_all_dim,
    else 1 (DeepSeek's yarn_apply_mscale). GQA families get 1."""
    y = spec.rope_scaling
    if spec.attention != "mla" or y is None or not y.mscale_all_dim:
        return 1.0
    m = yarn_mscale(y.factor, y.mscale_all_dim)
    return m * m


@functools.lru_cache(maxsize=32)
def _inv_freq_cpu(spec: ModelSpec) -> torch.Tensor:
    dim, base = rope_dim(spec), spec.rope_theta
    if spec.rope_scaling is not None:
        return _yarn_inv_freq(spec.rope_scaling, dim, base)
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


@functools.lru_cache(maxsize=64)
def inv_freq(spec: ModelSpec, device: torch.device) -> torch.Tensor:
    """inv_freq_F float32 on `device` (built once per spec and device; do not modify it)."""
    return _inv_freq_cpu(spec).to(device)


def rope_cos_sin(positions_T: torch.Tensor, spec: ModelSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """cos_TF, sin_TF (float32) at absolute positions, times attention_factor(spec)."""
    ang_TF = positions_T.float()[:, None] * inv_freq(spec, positions_T.device)[None, :]
    af = attention_factor(spec)
    if af == 1.0:
        return ang_TF.cos(), ang_TF.sin()
    return ang_TF.cos() * af, ang_TF.sin() * af
