"""Full-slot copy ops, the MoE layout attributes and the hook-driven prefetch pipeline, on CPU."""
import pytest
import torch

from dwdp_trtllm.config import DwdpConfig
from dwdp_trtllm.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.integration.full_slot import full_slot_ops
from dwdp_trtllm.integration.pipeline import LayerPipeline, SlotCopyExecutor
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


class _Moe(torch.nn.Module):
    """Stand-in for a TensorRT-LLM MoE: y = sum_e x @ w[e] over ALL experts of the bound weight."""

    def __init__(self, local_w):
        super().__init__()
        self.w = torch.nn.Parameter(local_w.clone(), requires_grad=False)

    def forward(self, x):
        return x + torch.einsum("th,ehk->tk", x, self.w)


def test_pipeline_binds_full_weights_and_orders_events():
    E, H, G, L, rank = 8, 4, 2, 3, 1
    cfg = DwdpConfig(dwdp_size=G)
    placement = make_placement(cfg, E)
    gen = torch.Generator().manual_seed(7)
    w_full = [torch.randn(E, H, H, generator=gen) for _ in range(L)]  # per layer, float32
    nb = H * H * 4
    layout = ExpertLayout(("w",), (nb,))
    exported = {(r, pos): w_full[pos][list(placement.local_experts[r])].contiguous().view(torch.uint8).reshape(-1)
                for r in range(G) for pos in range(L)}
    plan = build_copy_plan(placement, layout, rank, sliced=True, slice_bytes=48)
    ops = full_slot_ops(placement, layout, rank, plan)
    slots = [[torch.zeros(E * nb, dtype=torch.uint8)] for _ in range(2)]
    ex = SlotCopyExecutor(ops, slots, lambda peer, pos, t: exported[(peer, pos)])
    moes = [_Moe(w_full[pos][list(placement.local_experts[rank])]) for pos in range(L)]
    model = torch.nn.Sequential(*moes)

    def bind(m, pos, slot):
        m.w.data = slots[slot][0].view(torch.float32).view(E, H, H)

    pipe = LayerPipeline(moes, ex, bind, prefetch_depth=1).attach(model)
    x = torch.randn(5, H, generator=gen)
    ref = x
    for pos in range(L):
        ref = ref + torch.einsum("th,ehk->tk", ref, w_full[pos])
    for _ in range(2):  # second forward reuses the slots
        pipe.trace.clear()
        torch.testing.assert_close(model(x), ref)
    assert pipe.trace == [("issue", 0), ("wait", 0), ("issue", 1), ("release", 0), ("wait", 1), ("issue", 2),
                          ("release", 1), ("wait", 2), ("release", 2)]
    pipe.detach()
    assert not pipe.handles
