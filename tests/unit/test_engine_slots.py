"""The prefetch slots a DWDP rank allocates (runtime.DwdpRuntime) are the ones memory.rank_memory prices: one count,
prefetcher.prefetch_slot_count, called by both. The runtime used prefetch_depth + 1 where memory.py said
min(prefetch_depth + 1, MoE layers): one slot more than priced when prefetch_depth equals the MoE layers."""
from __future__ import annotations

import os

import pytest
import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.prefetcher import prefetch_slot_count
from dwdp_trtllm.deploy.memory import rank_memory
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.core.runtime import DwdpRuntime


@pytest.mark.parametrize("num_layers, depth", [(4, 1), (4, 2), (4, 3), (3, 2), (3, 1), (2, 1)])
def test_runtime_allocates_the_slots_memory_prices(num_layers, depth):
    spec = get_model("tiny", num_layers, 1)  # num_layers - 1 MoE layers
    cfg = DwdpConfig(dwdp_size=2, prefetch_depth=depth, transport="shm", weight_dtype="float32")
    cfg.validate_for(spec.num_experts, 2, num_moe_layers=spec.num_moe_layers)
    priced = rank_memory(spec, "dwdp", dwdp=cfg, weight_dtype="float32", max_num_tokens=0)
    rts = [DwdpRuntime(cfg, spec, group=None, dwdp_rank=r, device=torch.device("cpu"),
                       tag=f"slots{os.getpid()}_{num_layers}_{depth}_{r}") for r in range(2)]
    try:
        for rt in rts:
            assert rt.num_slots == len(rt.slots) == priced.num_slots == prefetch_slot_count(cfg, spec.num_moe_layers)
        # rank_memory prices the worst rank: its slot bytes are the largest the runtime allocates
        assert max(rt.slot_bytes for rt in rts) == priced.prefetch_slots
    finally:
        for rt in rts:
            rt.abort()


def test_slot_count_rule():
    """min(prefetch_depth + 1, MoE layers), at least the prefetcher's ring of 2."""
    assert [prefetch_slot_count(DwdpConfig(prefetch_depth=d), 3) for d in (1, 2, 3)] == [2, 3, 3]
    assert prefetch_slot_count(DwdpConfig(prefetch_depth=1), 1) == 2
    assert prefetch_slot_count(DwdpConfig(prefetch_depth=4), 58) == 5
