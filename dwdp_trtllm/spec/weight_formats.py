"""Bytes of a linear layer's weight in each weight format, scales included (pure).

One place for the storage cost of a [out, in] weight matrix; models.ModelSpec.expert_bytes and memory.py
price experts and dense layers with it.

| format  | element | scales                                                                 |
|---------|---------|------------------------------------------------------------------------|
| float32 | 4 B     | none                                                                   |
| bf16    | 2 B     | none                                                                   |
| fp8     | 1 B     | fp32 per 128x128 block (DeepSeek-V3 / R1 FP8 release, weight_block_size) |
| mxfp4   | 0.5 B   | E8M0 (1 B) per 32 elements along `in` (OCP MX spec; gpt-oss release)     |
| nvfp4   | 0.5 B   | FP8 E4M3 (1 B) per 16 elements along `in` (NVIDIA ModelOpt NVFP4)        |

NVFP4 also stores one fp32 global scale per tensor (weight_scale_2) and an input scale: 8 bytes per tensor,
left out (under 1e-6 of an expert).
"""
from __future__ import annotations

import math

FP8_BLOCK = 128
MXFP4_GROUP = 32
NVFP4_GROUP = 16

#: bytes per weight element by format name (scales not included)
ELEMENT_BYTES = {"float32": 4.0, "bf16": 2.0, "fp8": 1.0, "mxfp4": 0.5, "nvfp4": 0.5}
#: the formats a deployment's routed experts may be stored in (float32 is for CPU tests)
DEPLOY_FORMATS = ("bf16", "fp8", "mxfp4", "nvfp4")


def check_format(weight_dtype: str) -> None:
    if weight_dtype not in ELEMENT_BYTES:
        raise ValueError(f"weight_dtype {weight_dtype!r}: expected one of {', '.join(ELEMENT_BYTES)}")


def scale_bytes(out_features: int, in_features: int, weight_dtype: str) -> int:
    """Bytes of the scales of one [out, in] weight in `weight_dtype` (0 for float32 / bf16)."""
    check_format(weight_dtype)
    if weight_dtype == "fp8":
        return 4 * math.ceil(out_features / FP8_BLOCK) * math.ceil(in_features / FP8_BLOCK)
    if weight_dtype == "mxfp4":
        return out_features * math.ceil(in_features / MXFP4_GROUP)
    if weight_dtype == "nvfp4":
        return out_features * math.ceil(in_features / NVFP4_GROUP)
    return 0


def linear_bytes(out_features: int, in_features: int, weight_dtype: str) -> int:
    """Bytes of one [out, in] weight in `weight_dtype`, its scales included."""
    check_format(weight_dtype)
    n = out_features * in_features
    return math.ceil(n * ELEMENT_BYTES[weight_dtype]) + scale_bytes(out_features, in_features, weight_dtype)
