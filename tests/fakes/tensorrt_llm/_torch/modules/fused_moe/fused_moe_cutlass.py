"""CutlassFusedMoE, as tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py (newest stored, id 55194060208):
a MoE subclass; create_weights through its quant method sized expert_size_per_partition (skipped in __init__
when ConfigurableMoE builds it with skip_create_weights_in_init); run_moe reads self.w3_w1_weight,
self.w2_weight and list(self.quant_scales) on EVERY call and passes ep_size / ep_rank to the kernel.

run_moe's calling convention, by era (tests/unit/test_trtllm_fake_world.py `era_tree`):
- through the IPC era ("# PREVA" block): keywords, `run_moe(self, x, token_selected_experts, token_final_scales,
  x_sf=None, is_sf_swizzled=True, output_dtype=None, tuner_num_tokens=None, tuner_top_k=None, moe_output=None,
  enable_alltoall=None, lora_params=None)` (id 55194060208), called by moe_scheduler.py (stored id 52297624341) as
  `moe.backend.run_moe(x=x, token_selected_experts=..., token_final_scales=..., x_sf=x_sf, **_get_backend_kwargs(...))`;
- VA era ("# VA" block; the MoEImplBase execution unit, tensorrt_llm/_torch/moe/fused_moe/fused_moe_cutlass.py
  @ 02320c358831): `run_moe(self, ctx: MoERunContext, *, workspace=None)` reading ctx.x,
  ctx.token_selected_experts, ctx.token_final_scales, ctx.x_sf, ctx.output_dtype and ctx.comm_plan (moe_output,
  enable_alltoall), called by the scheduler (stored id 57366040755) as `moe.backend.run_moe(ctx, workspace=...)`.
  (Upstream's class there is a MoEImplBase, not a MoE; this fake keeps the MoE base in every era.)
Both return the [T, H] output in output_dtype (the moe_output buffer when one is given).
activation_type: the int MoE.__init__ stores (interface.py @ 581f0712), inherited from the fake MoE;
w3_w1_bias / w2_bias: None, set by the quant method's create_weights for bias=False (quantization.py id 55069560202).
alltoall (id 55194060208): __init__ sets `self.alltoall_method_type = self.select_alltoall_method_type()`, or
AlltoallMethodType.NotEnabled with `without_comm=True` (what ConfigurableMoE passes, configurable_moe.py stored id
3814212287: "without_comm=True: Prevents backend from initializing communication"); select_alltoall_method_type
returns NotEnabled when `self.mapping.dp_size == 1` (no attention DP) or `moe_tp_size != 1`; `enable_alltoall` is a
cached_property `self.alltoall_method_type != AlltoallMethodType.NotEnabled`, what run_moe reads when its
enable_alltoall argument is None. (The MNNVL / env-forced methods are not modelled: NotImplementedError.)
quantize_input(x, post_quant_comm) returns (x, None) for BF16 and FP8 block scales ("No quantization needed here,
handled in kernel", both ids).

`_fused_moe` stands in for torch.ops.trtllm.fused_moe (C++, not read): global expert ids; this rank computes
the experts [ep_rank * n, (ep_rank + 1) * n) with n = expert_size_per_partition (tokens routed elsewhere add
nothing, EP's combine sums them); SwiGLU on [w3; w1]: silu(x w1) * (x w3), the gated activation of moe_kernels.cu
(doGatedActivationKernel: `fc1_value = gemm_result[i]`, `gate_value = gemm_result[i + inter_size]`, stored ids
3775219850, 49366630937); FP8 128x128 block dequant. Computed in float32 (the audit's harness semantics).
"""
from functools import cached_property

import torch

from .interface import AlltoallMethodType, MoE
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
    def __init__(self, *, skip_create_weights_in_init=False, without_comm=False, **kwargs):
        super().__init__(**kwargs)
        qc = self.model_config.quant_config
        self.quant_method = DeepSeekFP8BlockScalesFusedMoEMethod() if qc == "fp8_block_scales" else UnquantizedFusedMoEMethod()
        self.alltoall_method_type = (AlltoallMethodType.NotEnabled if without_comm
                                     else self.select_alltoall_method_type())
        if not skip_create_weights_in_init:
            self.create_weights()

    def select_alltoall_method_type(self):
        if self.mapping.dp_size == 1:  # no attention DP
            return AlltoallMethodType.NotEnabled
        if self.mapping.moe_tp_size != 1:
            return AlltoallMethodType.NotEnabled
        raise NotImplementedError("fake tensorrt_llm: MNNVL alltoall (attention DP) is not modelled")

    @cached_property
    def enable_alltoall(self):
        return self.alltoall_method_type != AlltoallMethodType.NotEnabled

    def create_weights(self):
        self.quant_method.create_weights(self)

    def load_weights(self, weights):
        self.quant_method.load_weights(self, weights)

    def post_load_weights(self):
        self.quant_method.post_load_weights(self)

    def quantize_input(self, x, post_quant_comm=True, **kwargs):
        return x, None  # BF16: nothing; FP8 block scales: "handled in kernel"

    def _run(self, x, token_selected_experts, token_final_scales, x_sf, output_dtype, moe_output, enable_alltoall):
        assert x_sf is None and not enable_alltoall
        out = _fused_moe(x, token_selected_experts, token_final_scales, self.w3_w1_weight, self.w2_weight,
                         list(self.quant_scales), ep_size=self.ep_size, ep_rank=self.ep_rank,
                         n_local=self.expert_size_per_partition).to(output_dtype or x.dtype)
        if moe_output is not None:
            moe_output.copy_(out)
            return moe_output
        return out
# PREVA-BEGIN

    def run_moe(self, x, token_selected_experts, token_final_scales, x_sf=None, is_sf_swizzled=True,
                output_dtype=None, tuner_num_tokens=None, tuner_top_k=None, moe_output=None, enable_alltoall=None,
                lora_params=None):
        if enable_alltoall is None:
            enable_alltoall = self.enable_alltoall
        return self._run(x, token_selected_experts, token_final_scales, x_sf, output_dtype, moe_output,
                         enable_alltoall)
# PREVA-END
# VA-BEGIN

    def run_moe(self, ctx, *, workspace=None):
        plan = ctx.comm_plan
        return self._run(ctx.x, ctx.token_selected_experts, ctx.token_final_scales, ctx.x_sf, ctx.output_dtype,
                         plan.moe_output, plan.enable_alltoall)
# VA-END
