"""MoE expert-layout override: which routed experts this rank stores (our counterpart of upstream's
MoE._init_dwdp_expert_layout), computed from dwdp_trtllm.core.placement.make_placement.

Runs right after MoE.__init__ (before create_weights allocates per-partition storage), so each rank
allocates and loads only its own experts. After weight loading model_setup.py promotes the backend to the
full [num_experts, ...] view (ep_size 1, slots 0..E), the way upstream's fixup_moe_backends does.

This module owns the layout check (the rank's experts must be one contiguous id range: contiguous_range), once per
MoE instance, in every era, through rank_layout. Where our HopperDwdpManager is upstream's registered manager (VA
era), the MoE.__init__ wrapper (patches._patch_moe_init) computes it before the original runs (a wrapping placement
is refused before upstream allocates anything), hands it to the manager and then to override_layout; the manager's
num_experts_per_worker / start_expert_id are plain reads of it (no second check): upstream's
MoE._init_dwdp_expert_layout would read them, but our wrap skips that method while our manager is registered, and
require_layout_wrap refuses a TensorRT-LLM where the wrap is missing. Elsewhere (no manager of ours registered,
nothing upstream reads) override_layout computes it after the original.
"""
from __future__ import annotations

from ...core.placement import ExpertPlacement
from ..process_role import dwdp_rank, placement_for
from .targets import MOE_INTERFACE, PatchTargetMissing, trtllm_version

#: attributes MoE.__init__ must have set for the override to mean anything
LAYOUT_ATTRS = ("num_experts", "expert_size_per_partition", "num_slots", "slot_start", "slot_end",
                "initial_local_expert_ids", "layer_load_balancer", "mapping")


def contiguous_range(placement: ExpertPlacement, dwdp_rank: int) -> tuple[int, int]:
    """(start, size) of the routed experts dwdp_rank stores: one contiguous id range, since TensorRT-LLM loads
    [slot_start, slot_end). Raises ValueError for a wrapping (redundant, derived) placement. The layout's one check."""
    local = list(placement.local_experts[dwdp_rank])
    if local != list(range(local[0], local[0] + len(local))):
        raise ValueError(f"dwdp_rank {dwdp_rank} holds experts {local[:4]}...{local[-2:]}, not one contiguous range; "
                         "TensorRT-LLM loads [slot_start, slot_end): use num_experts_per_worker/num_prefetch_experts "
                         "or redundant_experts: 0")
    return local[0], len(local)


def layout_attrs(placement: ExpertPlacement, dwdp_rank: int) -> dict:
    """Attribute values for dwdp_rank (contiguous_range: ValueError for a wrapping placement)."""
    start, size = contiguous_range(placement, dwdp_rank)
    return {"num_slots": placement.num_experts, "expert_size_per_partition": size,
            "slot_start": start, "slot_end": start + size, "initial_local_expert_ids": list(range(start, start + size))}


def rank_layout(num_experts: int) -> dict:
    """This process's layout for a model of num_experts experts (its integration config's placement, its rank)."""
    return layout_attrs(placement_for(num_experts)[1], dwdp_rank())


def override_layout(moe, layout: dict | None = None) -> None:
    """Apply the layout (rank_layout of the instance's num_experts, unless the MoE.__init__ wrapper computed it
    already) to one MoE instance (wrapper and backend alike, as upstream does)."""
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
    for k, v in (layout or rank_layout(moe.num_experts)).items():
        setattr(moe, k, v)
    moe._dwdp_trtllm = {"dwdp_rank": dwdp_rank(), "placement": placement_for(moe.num_experts)[1]}
