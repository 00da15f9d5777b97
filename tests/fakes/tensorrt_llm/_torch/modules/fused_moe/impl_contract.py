"""MoECommPlan / MoERunContext, as tensorrt_llm/_torch/moe/fused_moe/impl_contract.py (stored ids 58454466051,
57374981836): frozen dataclasses; what ``run_moe(ctx)`` of a MoEImplBase execution unit reads. VA era only
(tests/unit/test_trtllm_fake_world.py `era_tree` deletes this file for the other eras)."""
from dataclasses import dataclass
from typing import List, Optional

import torch


@dataclass(frozen=True)
class MoECommPlan:
    input_sf_swizzled: bool
    enable_alltoall: bool
    moe_output: Optional[torch.Tensor]
    payload_in_workspace: bool


@dataclass(frozen=True)
class MoERunContext:
    token_selected_experts: Optional[torch.Tensor]
    token_final_scales: Optional[torch.Tensor]
    x: torch.Tensor
    x_sf: Optional[torch.Tensor]
    output_dtype: Optional[torch.dtype] = None
    do_finalize: bool = True
    lora_params: Optional[dict] = None
    router_logits: Optional[torch.Tensor] = None
    all_rank_num_tokens: Optional[List[int]] = None
    comm_plan: Optional[MoECommPlan] = None
