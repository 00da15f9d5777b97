"""MoE expert-layout override: which routed experts this rank stores (our counterpart of upstream's
MoE._init_dwdp_expert_layout), computed from dwdp_trtllm.placement.make_placement.

Runs right after MoE.__init__ (before create_weights allocates per-partition storage), so each rank
allocates and loads only its own experts. After weight loading model_setup.py promotes the backend to the
full [num_experts, ...] view (ep_size 1, slots 0..E), the way upstream's fixup_moe_backends does.
"""
from __future__ import annotations

from ...placement import ExpertPlacement
from ..hopper_manager import storage_range
from ..process_role import dwdp_rank, placement_for
from .targets import MOE_INTERFACE, PatchTargetMissing, trtllm_version

#: attributes MoE.__init__ must have set for the override to mean anything
LAYOUT_ATTRS = ("num_experts", "expert_size_per_partition", "num_slots", "slot_start", "slot_end",
                "initial_local_expert_ids", "layer_load_balancer", "mapping")


def layout_attrs(placement: ExpertPlacement, dwdp_rank: int) -> dict:
    """Attribute values for dwdp_rank; its experts must be one contiguous id range (TensorRT-LLM
    loads [slot_start, slot_end)). Raises ValueError for a wrapping (redundant, derived) placement."""
    start, size = storage_range(placement, dwdp_rank)
    return {"num_slots": placement.num_experts, "expert_size_per_partition": size,
            "slot_start": start, "slot_end": start + size, "initial_local_expert_ids": list(range(start, start + size))}


def override_layout(moe) -> None:
    """Apply the layout to one MoE instance (wrapper and backend alike, as upstream does)."""
    for a in LAYOUT_ATTRS:
        if not hasattr(moe, a):
            raise PatchTargetMissing(trtllm_version(), MOE_INTERFACE, f"MoE instance attribute {a}",
                                     "override the expert layout after MoE.__init__")
    if moe.layer_load_balancer is not None:
        raise RuntimeError("dwdp_trtllm and the MoE load balancer (EPLB) cannot be used together: "
                           "remove moe_config.load_balancer")
    m = moe.mapping
    if getattr(m, "moe_ep_size", 1) != 1 or getattr(m, "moe_tp_size", 1) != 1:
        raise RuntimeError(f"dwdp_trtllm needs TP1 context instances (moe_ep_size=1, moe_tp_size=1), got "
                           f"moe_ep_size={getattr(m, 'moe_ep_size', '?')} moe_tp_size={getattr(m, 'moe_tp_size', '?')}; "
                           "generate the config with `dwdp gen-config --mode disaggregated`")
    _, placement = placement_for(moe.num_experts)
    rank = dwdp_rank()
    for k, v in layout_attrs(placement, rank).items():
        setattr(moe, k, v)
    moe._dwdp_trtllm = {"dwdp_rank": rank, "placement": placement}
