"""MoE routers: DeepSeek-V3 grouped sigmoid top-k and softmax top-k (Mixtral, Qwen3, OLMoE, DeepSeek-V2).

Shape legend: T tokens, H hidden, E routed experts, K top-k, G expert groups (n_group).

Vectorised over tokens, no host syncs; on CUDA the grouped sigmoid selection is one Triton kernel
(engine/router_cuda.py, this file's eager code its reference). Returns (topk_ids_TK int64, topk_weights_TK float32); the
weights are final (normalised if spec.norm_topk_prob, times spec.routed_scaling_factor).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models import ModelSpec
from .fused import fused_enabled


def router_logits(x_TH: torch.Tensor, gate_w_EH: torch.Tensor) -> torch.Tensor:
    """logits_TE in float32 (routing decisions are precision sensitive).

    bf16 x and gate on CUDA: one bf16 GEMM with float32 accumulation and output (what TensorRT-LLM's DeepSeek
    router GEMM does). A bf16 x bf16 product is exact in float32, so this equals the float32 GEMM of the upcast
    inputs up to summation order, without materialising them or running a float32 GEMM."""
    if x_TH.is_cuda and x_TH.dtype == torch.bfloat16 and gate_w_EH.dtype == torch.bfloat16:
        try:
            return torch.mm(x_TH, gate_w_EH.t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError):  # a torch without mm(out_dtype=) for these inputs
            pass
    return F.linear(x_TH.float(), gate_w_EH.float())


def _finish(spec: ModelSpec, w_TK: torch.Tensor) -> torch.Tensor:
    if spec.norm_topk_prob:
        w_TK = w_TK / (w_TK.sum(-1, keepdim=True) + 1e-20)
    return w_TK * spec.routed_scaling_factor


def select_grouped_sigmoid(spec: ModelSpec, logits_TE: torch.Tensor, bias_E: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 noaux_tc: sigmoid scores; the correction bias steers selection only; a group's score
    is the sum of its top-2 biased scores; keep topk_group groups; top-k experts within them; weights
    are the unbiased sigmoid scores of the chosen experts."""
    T, E, G = logits_TE.shape[0], spec.num_experts, spec.n_group
    scores_TE = logits_TE.float().sigmoid()
    if scores_TE.is_cuda and fused_enabled():
        from . import router_cuda
        if router_cuda.supported(E, G, spec.topk_group, spec.top_k):
            return router_cuda.grouped_topk_cuda(scores_TE, bias_E, G, spec.topk_group, spec.top_k,
                                                 spec.norm_topk_prob, spec.routed_scaling_factor)
    choice_TE = scores_TE if bias_E is None else scores_TE + bias_E.float()[None, :]
    per_group = E // G
    group_TG = choice_TE.view(T, G, per_group).topk(min(2, per_group), dim=-1).values.sum(-1)
    keep_idx = group_TG.topk(spec.topk_group, dim=-1).indices
    keep_TG = torch.zeros_like(group_TG, dtype=torch.bool).scatter_(1, keep_idx, True)
    keep_TE = keep_TG[:, :, None].expand(T, G, per_group).reshape(T, E)
    masked_TE = choice_TE.masked_fill(~keep_TE, float("-inf"))
    ids_TK = masked_TE.topk(spec.top_k, dim=-1).indices
    return ids_TK, _finish(spec, scores_TE.gather(1, ids_TK))


def select_softmax(spec: ModelSpec, logits_TE: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over all experts, top-k (normalising top-k probs == Mixtral's softmax over top-k logits)."""
    probs_TE = logits_TE.float().softmax(dim=-1)
    w_TK, ids_TK = probs_TE.topk(spec.top_k, dim=-1)
    return ids_TK, _finish(spec, w_TK)


def select_experts(spec: ModelSpec, logits_TE: torch.Tensor, bias_E: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Route by spec.router: (topk_ids_TK int64, topk_weights_TK float32)."""
    if logits_TE.dim() != 2 or logits_TE.shape[1] != spec.num_experts:
        raise ValueError(f"logits_TE: expected [T, {spec.num_experts}], got {tuple(logits_TE.shape)}")
    if spec.router == "sigmoid_grouped":
        return select_grouped_sigmoid(spec, logits_TE, bias_E)
    if spec.router == "softmax":
        return select_softmax(spec, logits_TE)
    raise ValueError(f"{spec.name}: unknown router {spec.router!r}")
