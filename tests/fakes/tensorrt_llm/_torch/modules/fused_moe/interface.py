"""MoE base, as interface.py @ 581f0712 (tensorrt_llm/_torch/moe/fused_moe/; modules/fused_moe/ in older versions):
__init__ sets the layout (num_slots, expert_size_per_partition, slot_start/end, initial_local_expert_ids,
initial_global_assignments, layer_load_balancer, mapping) via _init_load_balancer (no EPLB: the ceil/floor
partition of _compute_ep_partition) or, with init_load_balancer=False (a ConfigurableMoE backend), the same
partition directly; create_weights is called later by the subclass / ConfigurableMoE.
VA era (same id): the LAST step of __init__ is `self._init_dwdp_expert_layout()`, which reads
`get_global_dwdp_manager()` and, when a manager is registered, sets expert_size_per_partition =
manager.num_experts_per_worker, slot_start = manager.start_expert_id, num_slots = num_experts, the round-robin
initial_global_assignments over manager.dwdp_size and initial_local_expert_ids = [slot_start, slot_end).
`activation_type` (same id): parameter `activation_type: ActivationType = ActivationType.Swiglu` (the enum of
_torch/utils.py, `from ...utils import ActivationType`), stored as `self.activation_type = int(activation_type)`:
an int on every MoE, the CutlassFusedMoE backend included. `bias: bool = False`, stored as `self.bias` (same id;
the quant method's create_weights reads it). `enable_alltoall` (same id): a layer-level property, False here
(CutlassFusedMoE overrides it).
AlltoallMethodType: the IntEnum fused_moe_cutlass.py (id 55194060208) imports from this module, members as in
interface.py stored id 3744845622 (NotEnabled = 0, NVLinkOneSided, NVLinkTwoSided, DeepEP, DeepEPLowLatency)."""
from enum import IntEnum

import torch

from ...utils import ActivationType


class AlltoallMethodType(IntEnum):
    NotEnabled = 0
    NVLinkOneSided = 1
    NVLinkTwoSided = 2
    DeepEP = 3
    DeepEPLowLatency = 4


def _compute_ep_partition(num_experts, ep_size, ep_rank):
    base, remainder = divmod(num_experts, ep_size)
    size = base + (1 if ep_rank < remainder else 0)
    start = ep_rank * base + min(ep_rank, remainder)
    return size, start, start + size


class MoE(torch.nn.Module):
    def __init__(self, *, routing_method, num_experts, hidden_size, intermediate_size, dtype, model_config,
                 layer_idx=None, bias=False, activation_type=ActivationType.Swiglu, init_load_balancer=True, **kwargs):
        super().__init__()
        self.bias = bias
        self.activation_type = int(activation_type)
        self.routing_method, self.num_experts = routing_method, num_experts
        self.hidden_size, self.intermediate_size, self.dtype = hidden_size, intermediate_size, dtype
        self.model_config, self.layer_idx = model_config, layer_idx
        self.mapping = model_config.mapping
        self.ep_size, self.ep_rank = self.mapping.moe_ep_size, self.mapping.moe_ep_rank
        if init_load_balancer:
            self._init_load_balancer()
        else:  # ConfigurableMoE syncs the wrapper's layout into the backend afterwards
            self.layer_load_balancer = None
            size, start, end = _compute_ep_partition(self.num_experts, self.ep_size, self.ep_rank)
            self.expert_size_per_partition, self.num_slots, self.slot_start, self.slot_end = size, num_experts, start, end
            self.initial_local_expert_ids = list(range(start, end))
            self.initial_global_assignments = list(range(num_experts))
# VA-BEGIN
        self._init_dwdp_expert_layout()

    def _init_dwdp_expert_layout(self):
        from tensorrt_llm._torch.pyexecutor.dwdp import get_global_dwdp_manager
        dwdp_manager = get_global_dwdp_manager()
        if dwdp_manager is None:
            return
        assert self.layer_load_balancer is None, "DWDP and EPLB (MoE load balancer) cannot be used together."
        self.num_slots = self.num_experts
        self.expert_size_per_partition = dwdp_manager.num_experts_per_worker
        dwdp_size = dwdp_manager.dwdp_size
        self.initial_global_assignments = [
            (ep_rank * self.num_experts // dwdp_size + local_slot_id) % self.num_experts
            for ep_rank in range(dwdp_size) for local_slot_id in range(self.expert_size_per_partition)]
        self.slot_start = dwdp_manager.start_expert_id
        self.slot_end = self.slot_start + self.expert_size_per_partition
        self.initial_local_expert_ids = list(range(self.slot_start, self.slot_end))
# VA-END

    @property
    def enable_alltoall(self):
        return False

    def pre_reload_weights(self):
        """MoE.pre_reload_weights (modules/fused_moe/interface.py, IPC-era version, index id 3744845622; in newer versions
        the same method sits on the MoE implementation blocks): refused with a load balancer (none is modelled here),
        else the quant method re-creates the weight Parameters (destructive; quantization.py)."""
        assert hasattr(self.quant_method, "pre_reload_weights"), "pre_reload_weights is not supported for this quant method"
        self.quant_method.pre_reload_weights(self)

    def _init_load_balancer(self):
        self.layer_load_balancer = None  # no moe_load_balancer configured in these tests
        self.initial_global_assignments = list(range(self.num_experts))
        size, start, end = _compute_ep_partition(self.num_experts, self.ep_size, self.ep_rank)
        self.expert_size_per_partition, self.num_slots, self.slot_start, self.slot_end = size, self.num_experts, start, end
        self.initial_local_expert_ids = self.initial_global_assignments[start:end]
