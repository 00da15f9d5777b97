"""MoE routers: DeepSeek-V3 grouped sigmoid top-k and softmax top-k (Mixtral, Qwen3, OLMoE, DeepSeek-V2).

Shape legend: T tokens, H hidden, E routed experts, K top-k, G expert groups (n_group).

Vectorised over tokens, no host syncs; on CUDA the grouped sigmoid selection is one Triton kernel
(engine/router_cuda.py, this file's eager code its reference). Returns (topk_ids_TK int64, topk_weights_TK float32); the
weights are final (normalised if spec.norm_topk_prob, times spec.routed_scaling_factor).

Routing skew (workload.routing_skew, dwdp_trtllm/spec/routing_skew.py): with a SkewTable the model's own choice is
replaced by systematic probability-proportional-to-size sampling of top_k distinct experts from the layer's target
popularity (Madow's systematic sampling: points (u + j) / K, j < K, on the popularity CDF; every expert's share is
below 1/K, so each interval holds at most one point and expert e is chosen with probability exactly K * share_e).
u is a hash of the token's *natural* top-k set (order-free) and the MoE layer: deterministic, identical in DEP and
DWDP (both route the same hidden states with the same router), and on any device. Tokens whose natural sets are equal get
equal skewed sets, so a model whose own routing clusters draws fewer distinct u (more sampling noise around the
target; bench/expert_load.py reports the routed split next to the target). Weights are the model's own
scores at the chosen experts, finished as usual; the grouped router's topk_group limit is not kept (the target is
the popularity). Without a SkewTable nothing here runs (outputs bit-exact).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..spec.models import ModelSpec
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


def router_scores(spec: ModelSpec, logits_TE: torch.Tensor, *, router: str | None = None) -> torch.Tensor:
    """scores_TE float32: sigmoid (sigmoid_grouped) or softmax over all experts (softmax) of the logits; the one
    [T, E] pass both the model's own selection and the skewed one read their weights from. router: the kind
    (default spec.router); a selection of one kind passes its own, whatever spec.router says."""
    kind = spec.router if router is None else router
    return logits_TE.float().sigmoid() if kind == "sigmoid_grouped" else logits_TE.float().softmax(-1)


def select_grouped_sigmoid(spec: ModelSpec, logits_TE: torch.Tensor, bias_E: torch.Tensor | None, *,
                           scores_TE: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 noaux_tc: sigmoid scores; the correction bias steers selection only; a group's score
    is the sum of its top-2 biased scores; keep topk_group groups; top-k experts within them; weights
    are the unbiased sigmoid scores of the chosen experts. scores_TE: router_scores(spec, logits_TE) when the
    caller has them already."""
    T, E, G = logits_TE.shape[0], spec.num_experts, spec.n_group
    if scores_TE is None:
        scores_TE = router_scores(spec, logits_TE, router="sigmoid_grouped")
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


def select_softmax(spec: ModelSpec, logits_TE: torch.Tensor, *,
                   scores_TE: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over all experts, top-k (normalising top-k probs == Mixtral's softmax over top-k logits).
    scores_TE: router_scores(spec, logits_TE) when the caller has them already."""
    probs_TE = router_scores(spec, logits_TE, router="softmax") if scores_TE is None else scores_TE
    w_TK, ids_TK = probs_TE.topk(spec.top_k, dim=-1)
    return ids_TK, _finish(spec, w_TK)


class SkewTable:
    """Per-MoE-layer target popularity as the sampler needs it: cdf_ME (float64, cumulative shares in the order
    order_ME lists the experts) on the routing device. popularity_ME: shares per layer (routing_skew.popularity_table),
    each below 1/top_k. The CDF order is a seeded per-layer permutation, so a token's K picks (one per 1/K of the CDF)
    are not tied to contiguous expert blocks (DEP's owner ranks)."""

    def __init__(self, popularity_ME, top_k: int, device: torch.device | str, seed: int = 0):
        import numpy as np
        pop = np.asarray(popularity_ME, dtype=np.float64)
        if pop.ndim != 2 or (pop < 0).any() or not np.allclose(pop.sum(1), 1.0):
            raise ValueError(f"popularity_ME: expected [MoE layers, experts] rows of shares summing to 1, got {pop.shape}")
        if (pop > 1.0 / top_k + 1e-9).any():
            raise ValueError(f"popularity_ME: a share above 1/top_k = {1 / top_k:.4g} cannot be routed (distinct experts)")
        # strictly below 1/K: a capped expert's interval then cannot hold two of the 1/K-spaced points after rounding
        pop = np.minimum(pop, (1.0 - 1e-9) / top_k)
        pop = pop / pop.sum(1, keepdims=True)
        M, E = pop.shape
        order = np.stack([np.random.default_rng([seed, m, 1]).permutation(E) for m in range(M)])
        cdf = np.cumsum(np.take_along_axis(pop, order, 1), 1)
        cdf[:, -1] = 1.0
        self.top_k = top_k
        self.cdf_ME = torch.from_numpy(cdf).to(device)
        self.order_ME = torch.from_numpy(order).to(device)
        #: j = 0..K-1 of the sampling points (u + j) / K, made once here, not per MoE layer and forward
        self.j_K = torch.arange(top_k, device=self.cdf_ME.device, dtype=torch.float64)

    def __len__(self) -> int:
        return self.cdf_ME.shape[0]


_M32 = 0xFFFFFFFF


def _mix32(h: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply, multiplier 0x45D9F3B) on int64 tensors holding values < 2**32:
    products stay below 2**59, so it is exact, without overflow, on CPU and CUDA."""
    h = ((h >> 16) ^ h) * 0x45D9F3B & _M32
    h = ((h >> 16) ^ h) * 0x45D9F3B & _M32
    return (h >> 16) ^ h


def skew_uniforms(ids_TK: torch.Tensor, moe_layer: int) -> torch.Tensor:
    """u_T in [0, 1) (float64): a hash of each token's chosen expert set (order-free) and the MoE layer."""
    h = _mix32((ids_TK.to(torch.int64) + 1) * 0x9E3779B1 & _M32).sum(-1) & _M32
    h = _mix32(h ^ ((moe_layer + 1) * 0x632BE5AB & _M32))
    return h.double() / 4294967296.0


def skew_select(spec: ModelSpec, logits_TE: torch.Tensor, ids_TK: torch.Tensor, skew: SkewTable,
                moe_layer: int, *, scores_TE: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids_TK, weights_TK) drawn from skew's popularity of moe_layer (module doc: systematic sampling).
    scores_TE: router_scores(spec, logits_TE) when the caller has them already (select_experts passes the ones
    its natural selection used: one [T, E] pass, not two)."""
    K = spec.top_k
    u_T = skew_uniforms(ids_TK, moe_layer)
    points_TK = (u_T[:, None] + skew.j_K[None, :]) / K
    cdf_E = skew.cdf_ME[moe_layer]
    slot_TK = torch.searchsorted(cdf_E, points_TK, right=True).clamp_(max=cdf_E.shape[0] - 1)
    new_TK = skew.order_ME[moe_layer][slot_TK]
    if scores_TE is None:
        scores_TE = router_scores(spec, logits_TE)
    return new_TK, _finish(spec, scores_TE.gather(1, new_TK))


def select_experts(spec: ModelSpec, logits_TE: torch.Tensor, bias_E: torch.Tensor | None = None, *,
                   skew: SkewTable | None = None, moe_layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Route by spec.router: (topk_ids_TK int64, topk_weights_TK float32); with `skew`, steered to its popularity
    of MoE layer `moe_layer` (module doc)."""
    if logits_TE.dim() != 2 or logits_TE.shape[1] != spec.num_experts:
        raise ValueError(f"logits_TE: expected [T, {spec.num_experts}], got {tuple(logits_TE.shape)}")
    if spec.router not in ("sigmoid_grouped", "softmax"):
        raise ValueError(f"{spec.name}: unknown router {spec.router!r}")
    scores_TE = router_scores(spec, logits_TE)  # once: the natural selection and the skewed weights both read it
    if spec.router == "sigmoid_grouped":
        ids_TK, w_TK = select_grouped_sigmoid(spec, logits_TE, bias_E, scores_TE=scores_TE)
    else:
        ids_TK, w_TK = select_softmax(spec, logits_TE, scores_TE=scores_TE)
    if skew is None:
        return ids_TK, w_TK
    return skew_select(spec, logits_TE, ids_TK, skew, moe_layer, scores_TE=scores_TE)
