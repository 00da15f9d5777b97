"""CutlassFusedMoE, as tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py (newest stored, id 55194060208):
a MoE subclass; create_weights through its quant method sized expert_size_per_partition (skipped in __init__
when ConfigurableMoE builds it with skip_create_weights_in_init); run_moe reads self.w3_w1_weight,
self.w2_weight and list(self.quant_scales) on EVERY call and passes ep_size / ep_rank to the kernel.

`_fused_moe` stands in for torch.ops.trtllm.fused_moe (C++, not read): global expert ids; this rank computes
the experts [ep_rank * n, (ep_rank + 1) * n) with n = expert_size_per_partition (tokens routed elsewhere add
nothing, EP's combine sums them); SwiGLU on [w3; w1] (silu(x w1) * (x w3)); FP8 128x128 block dequant.
Assumed semantics (the conformance audit's harness, section 3), computed in float32.
"""
import torch

from .interface import MoE
from .quantization import BLOCK, DeepSeekFP8BlockScalesFusedMoEMethod, UnquantizedFusedMoEMethod


def _dequant(w, scale):
    if scale is None:
        return w.float()
    s = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[: w.shape[0], : w.shape[1]]
    return w.float() * s


def _fused_moe(x, topk_ids, topk_w, w3_w1, w2, quant_scales, *, ep_size, ep_rank, n_local):
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    xf = x.float()
    fc1_s = quant_scales[0] if quant_scales else None
    fc2_s = quant_scales[1] if quant_scales else None
    for row in range(n_local):
        e = ep_rank * n_local + row
        tok, k = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        w13 = _dequant(w3_w1[row], None if fc1_s is None else fc1_s[row])
        h = xf[tok] @ w13.t()
        w3h, w1h = h.chunk(2, dim=-1)
        act = torch.nn.functional.silu(w1h) * w3h
        y = act @ _dequant(w2[row], None if fc2_s is None else fc2_s[row]).t()
        out.index_add_(0, tok, y * topk_w[tok, k].float()[:, None])
    return out


class CutlassFusedMoE(MoE):
    def __init__(self, *, skip_create_weights_in_init=False, **kwargs):
        super().__init__(**kwargs)
        qc = self.model_config.quant_config
        self.quant_method = DeepSeekFP8BlockScalesFusedMoEMethod() if qc == "fp8_block_scales" else UnquantizedFusedMoEMethod()
        if not skip_create_weights_in_init:
            self.create_weights()

    def create_weights(self):
        self.quant_method.create_weights(self)

    def load_weights(self, weights):
        self.quant_method.load_weights(self, weights)

    def post_load_weights(self):
        self.quant_method.post_load_weights(self)

    def run_moe(self, x, topk_ids, topk_w):
        return _fused_moe(x, topk_ids, topk_w, self.w3_w1_weight, self.w2_weight, list(self.quant_scales),
                          ep_size=self.ep_size, ep_rank=self.ep_rank, n_local=self.expert_size_per_partition)

    def forward_impl(self, x, router_logits):
        topk_ids, topk_w = self.routing_method.apply(router_logits)
        return self.run_moe(x, topk_ids, topk_w).to(x.dtype)

    def forward(self, x, router_logits):
        return self.forward_impl(x, router_logits)
