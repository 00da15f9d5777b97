"""MoE base, as tensorrt_llm/_torch/modules/fused_moe/interface.py (newest stored, id 57392471995):
__init__ sets the layout (num_slots, expert_size_per_partition, slot_start/end, initial_local_expert_ids,
initial_global_assignments, layer_load_balancer, mapping) via _init_load_balancer (or the
init_load_balancer=False branch); create_weights is called later by the subclass / ConfigurableMoE."""
import torch


class MoE(torch.nn.Module):
    def __init__(self, *, routing_method, num_experts, hidden_size, intermediate_size, dtype, model_config,
                 layer_idx=None, init_load_balancer=True, **kwargs):
        super().__init__()
        self.routing_method, self.num_experts = routing_method, num_experts
        self.hidden_size, self.intermediate_size, self.dtype = hidden_size, intermediate_size, dtype
        self.model_config, self.layer_idx = model_config, layer_idx
        self.mapping = model_config.mapping
        self.ep_size, self.ep_rank = self.mapping.moe_ep_size, self.mapping.moe_ep_rank
        self.layer_load_balancer = None
        if init_load_balancer:
            self._init_load_balancer()
        else:  # ConfigurableMoE syncs the layout into the backend afterwards
            self.num_slots = self.expert_size_per_partition = self.slot_start = self.slot_end = None
            self.initial_local_expert_ids = self.initial_global_assignments = None

    def _init_load_balancer(self):
        self.num_slots = self.num_experts
        self.expert_size_per_partition = self.num_slots // self.ep_size
        self.slot_start = self.ep_rank * self.expert_size_per_partition
        self.slot_end = self.slot_start + self.expert_size_per_partition
        self.initial_global_assignments = list(range(self.num_experts))
        self.initial_local_expert_ids = self.initial_global_assignments[self.slot_start:self.slot_end]
