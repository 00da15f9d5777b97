"""Copy plans: executed on labelled byte buffers, every fetched byte lands exactly once from the right source.

Each source's exported buffer of tensor t is filled with labels (expert id, byte index within the
expert's tensor), the plan's ops are carried out with numpy, and the destination slot must hold
exactly the labels of the fetched experts in order, every byte written once.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import CopyOp, CopyPlan, ExpertLayout, build_copy_plan, split_batches
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.core.placement import ExpertPlacement, make_placement

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def cases(draw):
    e = draw(st.one_of(st.sampled_from([1, 3, 7, 16, 31, 64, 256]), st.integers(1, 96)))
    g = draw(st.integers(1, min(8, e)))
    if draw(st.booleans()) and g > 1:
        stride = draw(st.integers(1, 12))
        size = draw(st.integers(stride, stride + 12))
        cfg = DwdpConfig(dwdp_size=g, num_experts_per_worker=size, num_prefetch_experts=stride,
                         source_policy=draw(st.sampled_from(["balanced", "lowest_rank"])))
        e = (g - 1) * stride + size
    else:
        red = draw(st.integers(0, e - -(-e // g)))
        cfg = DwdpConfig(dwdp_size=g, redundant_experts=red,
                         source_policy=draw(st.sampled_from(["balanced", "lowest_rank"])))
    nt = draw(st.integers(1, 3))
    tensor_bytes = tuple(draw(st.lists(st.integers(1, 97), min_size=nt, max_size=nt)))
    layout = ExpertLayout(tuple(f"t{i}" for i in range(nt)), tensor_bytes)
    slice_bytes = draw(st.integers(1, 300))
    return make_placement(cfg, e), layout, slice_bytes


def execute_and_check(p: ExpertPlacement, layout: ExpertLayout, rank: int, plan: CopyPlan) -> None:
    fetched = p.fetch_experts(rank)
    for t, nb in enumerate(layout.tensor_bytes):
        # label = expert * 1000 + byte index within the expert's tensor (nb < 1000)
        src = {s: np.array([ex * 1000 + b for ex in p.local_experts[s] for b in range(nb)], dtype=np.int64)
               for s in range(p.dwdp_size)}
        dst = np.full(len(fetched) * nb, -1, dtype=np.int64)
        writes = np.zeros(len(fetched) * nb, dtype=np.int64)
        for op in plan.ops:
            if op.tensor_idx != t:
                continue
            assert op.nbytes > 0 and op.source_rank != rank
            assert op.src_offset + op.nbytes <= len(src[op.source_rank]), op
            assert op.dst_offset + op.nbytes <= len(dst), op
            dst[op.dst_offset:op.dst_offset + op.nbytes] = src[op.source_rank][op.src_offset:op.src_offset + op.nbytes]
            writes[op.dst_offset:op.dst_offset + op.nbytes] += 1
            # the source actually owns what it serves, per the placement's source choice
            first_expert = fetched[op.dst_offset // nb]
            assert dict(p.sources[rank])[first_expert] == op.source_rank
        expected = np.array([ex * 1000 + b for ex in fetched for b in range(nb)], dtype=np.int64)
        assert np.all(writes == 1), f"tensor {t}: bytes written {np.unique(writes)} times"
        assert np.array_equal(dst, expected)
    assert plan.total_bytes == len(fetched) * layout.expert_bytes


def check_source_per_expert(p: ExpertPlacement, layout: ExpertLayout, rank: int, plan: CopyPlan) -> None:
    """Each expert-sized piece of an op is served by the source the placement chose for that expert."""
    fetched, srcs = p.fetch_experts(rank), dict(p.sources[rank])
    for op in plan.ops:
        nb = layout.tensor_bytes[op.tensor_idx]
        for k in range(op.dst_offset // nb, (op.dst_offset + op.nbytes - 1) // nb + 1):
            assert srcs[fetched[k]] == op.source_rank
            s_idx = (op.src_offset + (k * nb - op.dst_offset if k * nb > op.dst_offset else 0)) // nb
            assert p.local_experts[op.source_rank][s_idx] == fetched[k]


def check_round_robin(plan: CopyPlan) -> None:
    srcs = [op.source_rank for op in plan.ops]
    for i in range(len(srcs) - 1):
        if srcs[i] == srcs[i + 1]:
            left = set(srcs[i + 1:])
            assert left == {srcs[i]}, f"op {i}: repeated source {srcs[i]} while {left} still have slices"


@SETTINGS
@given(cases())
def test_unsliced_and_sliced_plans_cover_every_byte_once(case):
    p, layout, slice_bytes = case
    for rank in range(p.dwdp_size):
        unsliced = build_copy_plan(p, layout, rank, sliced=False)
        sliced = build_copy_plan(p, layout, rank, sliced=True, slice_bytes=slice_bytes)
        assert not unsliced.sliced and sliced.sliced and unsliced.dwdp_rank == rank
        for plan in (unsliced, sliced):
            execute_and_check(p, layout, rank, plan)
            check_source_per_expert(p, layout, rank, plan)
        assert all(op.nbytes <= slice_bytes for op in sliced.ops)
        assert sliced.bytes_per_source() == unsliced.bytes_per_source()
        check_round_robin(sliced)
        # a destination starts on the first serving peer after itself
        if sliced.ops:
            used = set(sliced.bytes_per_source())
            assert sliced.ops[0].source_rank == min(used, key=lambda s: (s - rank - 1) % p.dwdp_size)


@SETTINGS
@given(cases(), st.integers(0, 50))
def test_split_batches_keeps_order(case, max_ops):
    p, layout, slice_bytes = case
    plan = build_copy_plan(p, layout, p.dwdp_size - 1, sliced=True, slice_bytes=slice_bytes)
    batches = split_batches(plan, max_ops)
    assert tuple(op for b in batches for op in b) == plan.ops
    if max_ops > 0:
        assert all(len(b) <= max_ops for b in batches)
    else:
        assert len(batches) == 1


def test_unsliced_merges_contiguous_runs():
    """Derived G=2 on 8 experts: rank 0 pulls experts 4..7 from rank 1, one op per tensor."""
    p = make_placement(DwdpConfig(dwdp_size=2), 8)
    layout = ExpertLayout(("w13", "w2"), (96, 48))
    plan = build_copy_plan(p, layout, 0, sliced=False)
    assert plan.ops == (CopyOp(1, 0, 0, 0, 4 * 96), CopyOp(1, 1, 0, 0, 4 * 48))
    sliced = build_copy_plan(p, layout, 0, sliced=True, slice_bytes=256)
    assert [op.nbytes for op in sliced.ops] == [256, 128, 192]


def test_deepseek_r1_g3_fp8_sizes_round_robin():
    """Real sizes: 2 MiB slices over fp8 DeepSeek-R1 tensors with redundancy; offsets checked arithmetically."""
    spec = get_model("deepseek-r1")
    shapes = {**spec.expert_tensor_shapes(), **spec.expert_scale_shapes()}
    nbytes = tuple(int(np.prod(s)) * (4 if "scale" in k else 1) for k, s in shapes.items())
    layout = ExpertLayout(tuple(shapes), nbytes)
    assert layout.expert_bytes == spec.expert_bytes("fp8")
    p = make_placement(DwdpConfig(dwdp_size=3, redundant_experts=8), 256)
    for rank in range(3):
        plan = build_copy_plan(p, layout, rank, sliced=True, slice_bytes=2 << 20)
        check_round_robin(plan)
        check_source_per_expert(p, layout, rank, plan)
        assert plan.total_bytes == len(p.fetch_experts(rank)) * layout.expert_bytes
        assert len(plan.bytes_per_source()) == 2
        for t, nb in enumerate(nbytes):
            ivs = sorted((op.dst_offset, op.nbytes) for op in plan.ops if op.tensor_idx == t)
            pos = 0
            for off, n in ivs:
                assert off == pos
                pos += n
            assert pos == len(p.fetch_experts(rank)) * nb


def test_bad_rank_and_layout_raise():
    p = make_placement(DwdpConfig(dwdp_size=2), 8)
    with pytest.raises(ValueError, match="dwdp_rank 2"):
        build_copy_plan(p, ExpertLayout(("w",), (8,)), 2, sliced=False)
    with pytest.raises(ValueError, match="ExpertLayout"):
        ExpertLayout(("w13", "w2"), (8,))
    with pytest.raises(ValueError, match="ExpertLayout"):
        ExpertLayout(("w13",), (0,))
