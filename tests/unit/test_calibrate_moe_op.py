"""`dwdp calibrate`'s whole routed-expert op timer on the CPU (tiny shapes): it runs the engine's op over DWDP rank 0's
[local | slot] buffers (the same experts as one expert-ordered buffer), routes exactly balanced or by power_law_1.01,
and hands the op's call to the timing function it was given."""
from __future__ import annotations

import pytest
import torch

from dwdp_trtllm.calibrate.moe_op import rank0_split, split_record
from dwdp_trtllm.calibrate.moe_op_timer import EngineMoeOp
from dwdp_trtllm.engine.moe_compute import identity_map, routed_experts_forward
from dwdp_trtllm.spec.models import PRESETS

TINY = PRESETS["tiny"]  # 16 experts, top-4, H 64, I 32


def _op(gemm: str, group: int = 8):
    calls = []

    def time_ms(fn):
        calls.append(fn())
        return 1.5
    return EngineMoeOp(TINY, "bf16", gemm, group, torch.device("cpu"), time_ms), calls


def _full(op):
    """Each weight as one [E, ...] buffer in expert order, rebuilt from the op's buffers and maps."""
    out = {}
    for k, (ws, _) in op.bufs.items():
        out[k] = torch.stack([ws[int(b)][int(r)] for b, r in zip(op.idx_E, op.row_E)])
    return out


def test_split_is_dwdp_rank0s_local_and_slot_buffers():
    assert split_record(TINY, 8) == {"dwdp_size": 8, "local_experts": 2, "slot_experts": 14}
    assert split_record(PRESETS["deepseek-r1"], 8) == {"dwdp_size": 8, "local_experts": 32, "slot_experts": 224}
    op, _ = _op("multi_buffer")
    assert [w.shape[0] for w in op.bufs["w13"][0]] == [2, 14]
    assert [(int(b), int(r)) for b, r in zip(op.idx_E, op.row_E)] == list(rank0_split(TINY, 8))
    one, _ = _op("composite_view")  # the view: one expert-ordered range
    assert [w.shape[0] for w in one.bufs["w13"][0]] == [16]
    g1, _ = _op("multi_buffer", group=1)  # every expert local: no slot buffer
    assert [w.shape[0] for w in g1.bufs["w13"][0]] == [16]


def test_balanced_routing_gives_every_expert_the_same_rows_and_power_law_does_not():
    op, _ = _op("multi_buffer")
    ids, w = op.routing(64, "balanced")
    assert torch.bincount(ids.flatten(), minlength=16).tolist() == [64 * 4 // 16] * 16
    assert all(len(set(r)) == 4 for r in ids.tolist())  # top-k distinct experts per token
    assert torch.allclose(w.sum(-1), torch.ones(64))
    ids, _ = op.routing(4096, "power_law_1.01")
    counts = torch.bincount(ids.flatten(), minlength=16)
    assert counts.sum() == 4096 * 4 and counts.max() > 2 * counts.float().mean()
    with pytest.raises(ValueError, match="routing"):
        op.routing(8, "zipf")


@pytest.mark.parametrize("gemm", ["multi_buffer", "composite_view", "merge"])
def test_the_timed_call_is_the_engines_op_over_those_buffers(gemm):
    op, calls = _op(gemm)
    assert op.time_ms(32, "balanced") == 1.5
    (y,) = calls
    full = _full(op)
    # the same tokens and routing again: the op's generator is seeded, so rebuild them the way time_ms draws them
    ref_op, _ = _op(gemm)
    x = torch.randn(32, TINY.hidden_size, generator=ref_op._gen).to(torch.bfloat16)
    ids, w = ref_op.routing(32, "balanced")
    idx, row = identity_map(TINY.num_experts, "cpu")
    want = routed_experts_forward(x, ids, w, [full["w13"]], [full["w2"]], idx, row, gemm="reference")
    assert y.shape == (32, TINY.hidden_size)
    torch.testing.assert_close(y.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_fp8_experts_split_over_local_and_slot_give_the_one_range_result():
    """FP8 block-scale experts (the calibration's GPU case, on CPU shapes of 128-multiples): multi_buffer over
    [2 local | 14 slot] computes exactly what the same op over one expert-ordered range (the composite view) does."""
    import dataclasses
    sp = dataclasses.replace(TINY, hidden_size=256, moe_intermediate=128)
    outs = {}
    for gemm in ("multi_buffer", "composite_view"):
        calls = []
        op = EngineMoeOp(sp, "fp8", gemm, 8, torch.device("cpu"), lambda fn: (calls.append(fn()), 1.0)[1])
        assert op.bufs["w13"][0][0].dtype == torch.float8_e4m3fn and op.bufs["w13"][1] is not None
        op.time_ms(48, "power_law_1.01")
        outs[gemm] = calls[0]
    assert [w.shape[0] for w in EngineMoeOp(sp, "fp8", "multi_buffer", 8, torch.device("cpu"),
                                            lambda fn: 0.0).bufs["w2"][0]] == [2, 14]
    assert torch.equal(outs["multi_buffer"], outs["composite_view"])
