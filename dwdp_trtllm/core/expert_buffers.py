"""The routed-expert tensors that live in DWDP buffers: their names in buffer order, per-expert shapes, dtypes
and byte sizes (the layout contract of copy_plan.py). Owned by the core: the runtime sizes its buffers from it,
and both hosts (engine/weights.py fills the buffers; integration/ maps TensorRT-LLM's tensors onto it) use it.
"""
from __future__ import annotations

import math

import torch

from .copy_plan import ExpertLayout
from ..spec.models import ModelSpec

FP8_DTYPE = torch.float8_e4m3fn

#: torch dtype of the routed-expert weight tensors by weight_dtype name
EXPERT_DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp8": FP8_DTYPE}


def check_weight_dtype(weight_dtype: str) -> None:
    if weight_dtype not in EXPERT_DTYPES:
        raise ValueError(f"weight_dtype {weight_dtype!r}: expected one of {sorted(EXPERT_DTYPES)}")


def expert_tensor_names(weight_dtype: str) -> tuple[str, ...]:
    """Buffer order of the per-expert tensors (the DWDP prefetch contract)."""
    check_weight_dtype(weight_dtype)
    return ("w13", "w2", "w13_scale", "w2_scale") if weight_dtype == "fp8" else ("w13", "w2")


def expert_tensor_specs(spec: ModelSpec, weight_dtype: str) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """One expert's routed tensors in buffer order (expert_tensor_names): (name, per-expert shape, dtype)."""
    shapes = {**spec.expert_tensor_shapes(), **spec.expert_scale_shapes()}
    return [(n, shapes[n], torch.float32 if n.endswith("scale") else EXPERT_DTYPES[weight_dtype])
            for n in expert_tensor_names(weight_dtype)]


def expert_layout(spec: ModelSpec, weight_dtype: str) -> ExpertLayout:
    """Byte sizes of one expert's tensors in buffer order (engine.weights.expert_tensors fills them)."""
    specs = expert_tensor_specs(spec, weight_dtype)
    return ExpertLayout(tuple(n for n, _, _ in specs), tuple(math.prod(s) * d.itemsize for _, s, d in specs))
