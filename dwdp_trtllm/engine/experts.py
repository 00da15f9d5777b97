"""The seam between the model and the parallel modes: who computes the routed experts of a MoE layer.

Shape legend: T tokens on this rank, H hidden, K top-k, E experts, I moe intermediate.

The model computes attention, router and shared experts itself and hands the routed part to an
ExpertBackend. Reference (all experts local), DEP (all-to-all to expert owners) and DWDP (local +
prefetched experts) are three implementations of the same call.
"""
from __future__ import annotations

from typing import Protocol

import torch


class ExpertBackend(Protocol):
    def forward(self, moe_idx: int, x_TH: torch.Tensor, topk_ids_TK: torch.Tensor,
                topk_weights_TK: torch.Tensor) -> torch.Tensor:
        """Routed-expert output y_TH = sum_k w[t,k] * expert_{ids[t,k]}(x[t]) for MoE layer `moe_idx`.

        x_TH: activations (model dtype); topk_ids_TK: int64 expert ids; topk_weights_TK: float32
        routing weights (already normalised/scaled). Returns y_TH in x's dtype, on the current stream.
        """
        ...

    def on_attention_done(self, moe_idx: int) -> None:
        """Called after the attention of the layer holding MoE layer `moe_idx` has been enqueued."""
        ...
