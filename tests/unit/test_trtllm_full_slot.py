"""Full-slot copy ops and the MoE layout attributes, on CPU (the hook/lifecycle drivers: test_trtllm_fake_world.py)."""
import pytest
import torch

from dwdp_trtllm.config import DwdpConfig
from dwdp_trtllm.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.integration.full_slot import full_slot_ops
from dwdp_trtllm.integration.trtllm.layout import layout_attrs
from dwdp_trtllm.placement import make_placement

CASES = [(DwdpConfig(dwdp_size=4), 16), (DwdpConfig(dwdp_size=3, num_experts_per_worker=8, num_prefetch_experts=4), 16),
         (DwdpConfig(dwdp_size=3, redundant_experts=2), 10), (DwdpConfig(dwdp_size=5), 13)]


def _exported(placement, layout, gen):
    """Random bytes of every expert/tensor and each rank's exported buffers (local experts back to back)."""
    full = [torch.randint(0, 256, (placement.num_experts, nb), dtype=torch.uint8, generator=gen) for nb in layout.tensor_bytes]
    bufs = [[full[t][list(held)].reshape(-1) for t in range(len(full))] for held in placement.local_experts]
    return full, bufs


@pytest.mark.parametrize("cfg,E", CASES)
@pytest.mark.parametrize("sliced", [False, True])
def test_full_slot_ops_rebuild_every_expert_exactly_once(cfg, E, sliced):
    placement = make_placement(cfg, E)
    layout = ExpertLayout(("w13", "w2", "scale"), (96, 40, 12))
    full, bufs = _exported(placement, layout, torch.Generator().manual_seed(E + cfg.dwdp_size))
    for rank in range(cfg.dwdp_size):
        plan = build_copy_plan(placement, layout, rank, sliced=sliced, slice_bytes=256 if sliced else 2 << 20)
        ops = full_slot_ops(placement, layout, rank, plan)
        slot = [torch.zeros(E * nb, dtype=torch.uint8) for nb in layout.tensor_bytes]
        hits = [torch.zeros(E * nb, dtype=torch.int32) for nb in layout.tensor_bytes]
        for op in ops:
            slot[op.tensor_idx][op.dst_offset:op.dst_offset + op.nbytes] = bufs[op.source_rank][op.tensor_idx][op.src_offset:op.src_offset + op.nbytes]
            hits[op.tensor_idx][op.dst_offset:op.dst_offset + op.nbytes] += 1
        for t in range(len(full)):
            assert torch.equal(slot[t], full[t].reshape(-1))
            assert torch.equal(hits[t], torch.ones_like(hits[t]))
        # local experts come from the own buffer, each exactly once
        assert sum(op.nbytes for op in ops if op.source_rank == rank) == len(placement.local_experts[rank]) * sum(layout.tensor_bytes)
        assert sum(op.nbytes for op in ops if op.source_rank != rank) == plan.total_bytes


def test_layout_attrs_contiguous_and_wrapping():
    p = make_placement(DwdpConfig(dwdp_size=3, num_experts_per_worker=24, num_prefetch_experts=16), 56)
    a = layout_attrs(p, 1)
    assert a == {"num_slots": 56, "expert_size_per_partition": 24, "slot_start": 16, "slot_end": 40,
                 "initial_local_expert_ids": list(range(16, 40))}
    wrap = make_placement(DwdpConfig(dwdp_size=3, redundant_experts=2), 10)
    assert layout_attrs(wrap, 0)["slot_end"] == 6
    with pytest.raises(ValueError, match="contiguous"):
        layout_attrs(wrap, 2)  # holds 7,8,9,0,1
