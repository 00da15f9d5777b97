"""Weight creation / loading of the CUTLASS MoE, as tensorrt_llm/_torch/modules/fused_moe/quantization.py
(newest stored, id 55069560202):
- UnquantizedFusedMoEMethod: w3_w1_weight [E_local, 2I, H], w2_weight [E_local, H, I];
- DeepSeekFP8BlockScalesFusedMoEMethod: float8_e4m3fn weights plus fp32 w3_w1_weight_scaling_factor
  [E_local, 2*ceil(I/128), ceil(H/128)] and w2_weight_scaling_factor [E_local, ceil(H/128), ceil(I/128)];
  setup_quant_scales stores the Parameter OBJECTS in module.quant_scales (so a later param.data rebind
  reaches the kernel), and post_load_weights calls it again;
- create_weights (FusedMoEMethodBase, same id): `if module.bias:` registers w3_w1_bias / w2_bias, `else:
  module.w3_w1_bias = None; module.w2_bias = None` (bias experts are not modelled by this fake);
- load_expert_w3_w1_weight: dst_w3, _ = chunk(2); _, dst_w1 = chunk(2) (w3 first, w1 second);
- load_weights walks initial_local_expert_ids: local slot i holds global expert initial_local_expert_ids[i].
"""
from typing import NamedTuple

import torch

BLOCK = 128


class FusedMoEQuantScalesFP8BlockScales(NamedTuple):
    fc_weight_scales: torch.Tensor
    proj_weight_scales: torch.Tensor


def _param(shape, dtype):
    return torch.nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


class UnquantizedFusedMoEMethod:
    weight_dtype = None

    def create_weights(self, module):
        n, I, H = module.expert_size_per_partition, module.intermediate_size, module.hidden_size
        dt = self.weight_dtype or module.dtype
        module.register_parameter("w3_w1_weight", _param((n, 2 * I, H), dt))
        module.register_parameter("w2_weight", _param((n, H, I), dt))
        if module.bias:
            raise NotImplementedError("fake tensorrt_llm: MoE experts with bias are not modelled")
        module.w3_w1_bias = None
        module.w2_bias = None

    def load_weights(self, module, weights):
        for slot, e in enumerate(module.initial_local_expert_ids):
            dst_w3, _ = module.w3_w1_weight.data[slot].chunk(2, dim=0)
            _, dst_w1 = module.w3_w1_weight.data[slot].chunk(2, dim=0)
            dst_w3.copy_(weights[f"{e}.w3.weight"])
            dst_w1.copy_(weights[f"{e}.w1.weight"])
            module.w2_weight.data[slot].copy_(weights[f"{e}.w2.weight"])
            self.load_scales(module, weights, slot, e)

    def load_scales(self, module, weights, slot, e):
        pass

    def setup_quant_scales(self, module):
        module.quant_scales = ()

    def post_load_weights(self, module):
        self.setup_quant_scales(module)

    def pre_reload_weights(self, module):
        """FusedMoEMethodBase.pre_reload_weights (quantization.py @ 002366a4074c): every parameter named in
        module.rebuild_tensor_metadata is re-registered as a new uninitialised Parameter of its creation shape (the
        old storage is dropped). Here the expert parameters create_weights registered stand for that metadata."""
        for name, p in list(module.named_parameters(recurse=False)):
            module.register_parameter(name, torch.nn.Parameter(torch.empty_like(p), requires_grad=False))


class DeepSeekFP8BlockScalesFusedMoEMethod(UnquantizedFusedMoEMethod):
    weight_dtype = torch.float8_e4m3fn

    def create_weights(self, module):
        super().create_weights(module)
        n, I, H = module.expert_size_per_partition, module.intermediate_size, module.hidden_size
        cI, cH = -(-I // BLOCK), -(-H // BLOCK)
        module.register_parameter("w3_w1_weight_scaling_factor", _param((n, 2 * cI, cH), torch.float32))
        module.register_parameter("w2_weight_scaling_factor", _param((n, cH, cI), torch.float32))

    def load_scales(self, module, weights, slot, e):
        s3, _ = module.w3_w1_weight_scaling_factor.data[slot].chunk(2, dim=0)
        _, s1 = module.w3_w1_weight_scaling_factor.data[slot].chunk(2, dim=0)
        s3.copy_(weights[f"{e}.w3.weight_scale_inv"])
        s1.copy_(weights[f"{e}.w1.weight_scale_inv"])
        module.w2_weight_scaling_factor.data[slot].copy_(weights[f"{e}.w2.weight_scale_inv"])

    def setup_quant_scales(self, module):
        module.quant_scales = FusedMoEQuantScalesFP8BlockScales(
            fc_weight_scales=module.w3_w1_weight_scaling_factor, proj_weight_scales=module.w2_weight_scaling_factor)
