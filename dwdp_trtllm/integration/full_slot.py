"""Full-slot prefetch layout for TensorRT-LLM's stock MoE backends (pure, CPU-testable).

TensorRT-LLM's CUTLASS MoE reads one [E, ...] tensor per weight. Without a VMM composite view, a
prefetch slot is therefore a whole-layer buffer: expert e of tensor t lives at e * tensor_bytes[t].
Each layer fills it with (a) this rank's own experts from its exported buffer (local copies, source
= own dwdp_rank) and (b) the peers' experts. copy_plan.build_copy_plan writes peers' experts in
fetched order; `full_slot_ops` re-targets those ops to expert-id positions, splitting an op where it
crosses an expert boundary whose destinations are not adjacent, and adds the local ops.
"""
from __future__ import annotations

from ..core.copy_plan import CopyOp, CopyPlan, ExpertLayout, merge_adjacent
from ..core.placement import ExpertPlacement


def full_slot_ops(placement: ExpertPlacement, layout: ExpertLayout, rank: int, plan: CopyPlan) -> tuple[CopyOp, ...]:
    """Ops that fill a full [E, ...] slot for dwdp_rank `rank`: local runs first, then the plan's peer ops.

    Offsets: src into the source's exported buffer (local experts back to back), dst into the slot
    buffer of that tensor (E * tensor_bytes). Every slot byte is written exactly once. Peer op order
    (round-robin across sources when sliced) is kept.
    """
    if plan.dwdp_rank != rank:
        raise ValueError(f"plan is for dwdp_rank {plan.dwdp_rank}, not {rank}")
    fetched = placement.fetch_experts(rank)
    local_ops = []
    for t, nb in enumerate(layout.tensor_bytes):
        local_ops.extend(CopyOp(rank, t, i * nb, e * nb, nb) for i, e in enumerate(placement.local_experts[rank]))
    peer_ops: list[CopyOp] = []
    for op in plan.ops:
        nb = layout.tensor_bytes[op.tensor_idx]
        pos, end, src = op.dst_offset, op.dst_offset + op.nbytes, op.src_offset
        while pos < end:
            k, within = divmod(pos, nb)
            n = min(end - pos, nb - within)
            peer_ops.append(CopyOp(op.source_rank, op.tensor_idx, src, fetched[k] * nb + within, n))
            pos, src = pos + n, src + n
    return tuple(merge_adjacent(local_ops) + merge_adjacent(peer_ops))
