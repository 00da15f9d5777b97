"""Full-slot copy ops, the MoE layout attributes and the promotion to the full expert range, on CPU (the
hook/lifecycle drivers: test_trtllm_fake_world.py)."""
import sys
import types

import pytest
import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import ExpertLayout, build_copy_plan
from dwdp_trtllm.integration.full_slot import full_slot_ops
from dwdp_trtllm.integration.trtllm.moe_layout import layout_attrs
from dwdp_trtllm.core.placement import make_placement

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


def test_promotion_sets_wrapper_and_backend_and_reinstalls_backend_activation(monkeypatch):
    """Upstream fixup_moe_backends (setup.py @ 11eba2696184): both the ConfigurableMoE wrapper and the
    backend get ep_size 1 / slots 0..E ..., then install_activation_params(backend) of its package re-sizes the
    per-expert activation constants (act_* non-persistent buffers, activation.py @ 1262edbc3809; backend
    only; skipped when `activation` is None). Those buffers pass the per-expert guard only when they will be
    re-installed; any other per-expert tensor is refused."""
    from dwdp_trtllm.integration.trtllm.model_setup import PROMOTED, check_per_expert, promote
    pkg = "dwdp_fake_moe_root"
    seen = []

    def install(m):
        seen.append((type(m).__name__, m.expert_size_per_partition))
        m.register_buffer("act_clamp", torch.full((m.expert_size_per_partition,), 7.0), persistent=False)
    act = types.ModuleType(f"{pkg}.activation")
    act.install_activation_params = install
    monkeypatch.setitem(sys.modules, f"{pkg}.activation", act)
    Backend = type("Backend", (torch.nn.Module,), {"__module__": f"{pkg}.fused_moe_cutlass"})
    wrapper, backend, plain = torch.nn.Module(), Backend(), Backend()
    for m in (wrapper, backend, plain):
        m.initial_global_assignments, m.expert_size_per_partition = [0, 1], 4
    backend.activation, plain.activation = "swiglu(clamp=7)", None
    install(backend)
    seen.clear()
    backend.register_parameter("w2_weight", torch.nn.Parameter(torch.zeros(4, 2), requires_grad=False))
    check_per_expert([backend], ["w2_weight"], 4)  # act_clamp [4]: re-installed below, accepted
    plain.register_buffer("act_clamp", torch.zeros(4), persistent=False)
    with pytest.raises(RuntimeError, match="Backend.act_clamp is per-expert"):
        check_per_expert([plain], ["w2_weight"], 4)  # no activation to re-install from: refused
    promote([wrapper, backend, plain], 16, backends=[backend, plain])
    for m in (wrapper, backend, plain):
        assert {k: getattr(m, k) for k in PROMOTED} == {
            "ep_size": 1, "ep_rank": 0, "expert_size_per_partition": 16, "slot_start": 0, "slot_end": 16,
            "num_slots": 16, "initial_local_expert_ids": list(range(16)), "initial_global_assignments": list(range(16))}
    assert seen == [("Backend", 16)] and backend.act_clamp.shape == (16,)
