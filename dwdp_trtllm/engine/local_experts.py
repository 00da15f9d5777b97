"""The reference ExpertBackend: every routed expert of every MoE layer in this one process.

Shape legend: T tokens, H hidden, K top-k, E experts, I moe intermediate.
Per MoE layer the experts are one buffer per tensor in buffer order (weights.expert_tensor_names):
    w13 [E, 2I, H], w2 [E, H, I]  (+ w13_scale [E, ceil(2I/128), ceil(H/128)], w2_scale for fp8)
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch

from ..spec.models import ModelSpec
from .moe_compute import gemm_path, identity_map, routed_experts_forward
from .weights import EXPERT_DTYPES, stack_experts, stacked_expert_tensors


class LocalExperts:
    """ExpertBackend with all experts local (single process, no communication)."""

    def __init__(self, spec: ModelSpec, layers: Sequence[Mapping[str, torch.Tensor]], gemm: str = "reference"):
        if len(layers) != spec.num_moe_layers:
            raise ValueError(f"LocalExperts: got weights for {len(layers)} MoE layers, {spec.name} has {spec.num_moe_layers}")
        gemm_path(gemm)  # ValueError naming the choices
        shapes = spec.expert_tensor_shapes()
        for i, t in enumerate(layers):
            for name in ("w13", "w2"):
                want = (spec.num_experts, *shapes[name])
                if name not in t or tuple(t[name].shape) != want:
                    got = tuple(t[name].shape) if name in t else "missing"
                    raise ValueError(f"LocalExperts: MoE layer {i} tensor {name!r}: expected shape {want}, got {got}")
        self.spec, self.layers, self.gemm = spec, list(layers), gemm
        dev = layers[0]["w13"].device if layers else torch.device("cpu")
        # int32: the dtype of the plugin op's maps (moe_compute paths take either)
        self._buf_idx_E, self._row_E = identity_map(spec.num_experts, dev)

    @classmethod
    def from_seed(cls, spec: ModelSpec, seed: int, weight_dtype: str, device: torch.device | str,
                  gemm: str = "reference", *, on_device: bool = False) -> "LocalExperts":
        """All experts from weights.init_expert, stored as `weight_dtype` (float32|bf16|fp8)."""
        if weight_dtype not in EXPERT_DTYPES:
            raise ValueError(f"weight_dtype {weight_dtype!r}: expected one of {sorted(EXPERT_DTYPES)}")
        layers = [stacked_expert_tensors(spec, l, range(spec.num_experts), seed, weight_dtype, device, on_device=on_device)
                  for l in spec.moe_layer_ids]
        return cls(spec, layers, gemm)

    @classmethod
    def from_loader(cls, spec: ModelSpec, expert_loader: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]],
                    weight_dtype: str, device: torch.device | str, gemm: str = "reference") -> "LocalExperts":
        """All experts from expert_loader(layer, e) -> (w13_NH, w2_HI) (e.g. loader.load_checkpoint)."""
        layers = [stack_experts(spec, l, range(spec.num_experts), expert_loader, weight_dtype, device)
                  for l in spec.moe_layer_ids]
        return cls(spec, layers, gemm)

    def forward(self, moe_idx: int, x_TH: torch.Tensor, topk_ids_TK: torch.Tensor,
                topk_weights_TK: torch.Tensor) -> torch.Tensor:
        t = self.layers[moe_idx]
        scales = "w13_scale" in t
        return routed_experts_forward(
            x_TH, topk_ids_TK, topk_weights_TK, [t["w13"]], [t["w2"]], self._buf_idx_E, self._row_E, gemm=self.gemm,
            w13_scale_sources=[t["w13_scale"]] if scales else None, w2_scale_sources=[t["w2_scale"]] if scales else None)

    def on_attention_done(self, moe_idx: int) -> None:
        return None
