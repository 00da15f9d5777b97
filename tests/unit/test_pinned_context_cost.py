"""sizing/context_cost.py's context iteration pinned on hand-built loads: what a list of request chunks puts on
each rank (tokens, keys read, the causal attention core's FLOPs written out for DeepSeek-R1's MLA, the segment
count, the token-weighted request length the attention tables are read at), priced by the planner's
iteration_times; DWDP's one free-running rank and its prefetch-bound count, DEP's lock-step group and its
communication time; the KV bytes a DWDP rank sends beside its pulls; the price cache's bins and the counters."""
import math
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.perf import planner as pl
from dwdp_trtllm.perf.bench_work import IterationLoad
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.sizing.context_cost import ContextCost, Segments
from dwdp_trtllm.spec.models import PRESETS

R1 = PRESETS["deepseek-r1"]  # 128 heads, q/k head 128 + 64 rope, v head 128, no sliding window


def _spec() -> PlanSpec:
    return PlanSpec(model=R1, gpu=get_gpu("h200"), target="trtllm")


def _core(n: float, p: float) -> float:
    """QK^T + PV of n causal queries after p cached keys, per layer: 2 x heads x (192 + 128) x (n p + n^2 / 2)."""
    return 2.0 * 128 * (192 + 128) * (n * p + n * n / 2)


def _hand_load(ranks):
    """IterationLoad of one iteration, each rank a list of (prefix, length, isl) chunks; and the request length the
    attention tables are read at (the chunks' ISLs weighted by their lengths)."""
    tok = np.array([[sum(n for _, n, _ in r) for r in ranks]], float)
    kv = np.array([[sum(p + n for p, n, _ in r) for r in ranks]], float)
    core = np.array([[sum(_core(n, p) for p, n, _ in r) for r in ranks]], float)
    seg = np.array([[len(r) for r in ranks]], float)
    weighted = [(i, n) for r in ranks for _, n, i in r]
    isl = sum(i * n for i, n in weighted) / sum(n for _, n in weighted)
    return IterationLoad(tok, kv, core, seg), isl


# a chunk of a long prompt after 4096 cached tokens, a whole 2K prompt, the first 1000 tokens of a 5000-token one
CHUNKS = ((4096, 3000, 16384), (0, 2000, 2000), (0, 1000, 5000))


def test_segments_count_their_tokens():
    assert Segments(CHUNKS).tokens == 6000
    assert Segments(()).tokens == 0


def test_a_dwdp_iteration_is_the_planners_price_of_the_hand_built_load():
    spec = _spec()
    load, isl = _hand_load([CHUNKS])
    assert isl == pytest.approx((16384 * 3000 + 2000 * 2000 + 5000 * 1000) / 6000)
    it = pl.iteration_times(spec, load, 8, 1, 1 << 20, isl)
    cost = ContextCost(spec, "dwdp", 8, redundant=1, slice_bytes=1 << 20)
    assert cost.seconds([Segments(CHUNKS)]) == pytest.approx(it.dwdp_SR[0, 0] * 1e-6, rel=1e-12)
    assert cost.comm_s == 0.0 and cost.iterations == 1


def test_a_dep_iteration_is_the_lock_step_price_of_every_ranks_hand_built_load():
    spec = _spec()
    ranks = [CHUNKS, ((0, 8192, 8192),), ((100, 50, 150), (0, 30, 30)), ()]  # an idle rank too
    load, isl = _hand_load(ranks)
    it = pl.iteration_times(spec, load, 4, 0, 2 << 20, isl, "high", "deepep_deepgemm")
    cost = ContextCost(spec, "dep", 4, which="high", variant="deepep_deepgemm")
    got = cost.seconds([Segments(r) for r in ranks])
    assert got == pytest.approx(it.dep_S[0] * 1e-6, rel=1e-12)
    assert cost.comm_s == pytest.approx(it.dep_comm_S[0] * 1e-6, rel=1e-12) and cost.comm_s > 0
    cost.seconds([Segments(r) for r in ranks])  # a second iteration adds its communication time
    assert cost.comm_s == pytest.approx(2 * it.dep_comm_S[0] * 1e-6, rel=1e-12)
    assert (cost.prefetch_bound, cost.iterations) == (0, 2)


def test_a_one_token_chunk_reads_the_attention_tables_at_its_requests_length():
    """The last token of an 8K prompt: the tables are read at ISL 8192 (8192 x 1 / 1 token), not half of it."""
    spec = _spec()
    chunk = ((8191, 1, 8192),)
    load, isl = _hand_load([chunk])
    assert isl == 8192
    want = pl.iteration_times(spec, load, 8, 0, 2 << 20, 8192).dwdp_SR[0, 0] * 1e-6
    assert want != pytest.approx(pl.iteration_times(spec, load, 8, 0, 2 << 20, 4096).dwdp_SR[0, 0] * 1e-6, rel=1e-9)
    assert ContextCost(spec, "dwdp", 8).seconds([Segments(chunk)]) == pytest.approx(want, rel=1e-12)


def test_dwdp_counts_the_iterations_the_exposed_prefetch_bound():
    """DWDP8: a 512-token iteration waits on its expert pull, a 16K one hides it."""
    spec = _spec()
    cost = ContextCost(spec, "dwdp", 8)
    for n in (512, 16384, 512):
        load, isl = _hand_load([((0, n, n),)])
        want = pl.iteration_times(spec, load, 8, 0, 2 << 20, isl)
        assert cost.seconds([Segments(((0, n, n),))]) == pytest.approx(want.dwdp_SR[0, 0] * 1e-6, rel=1e-12)
        assert bool(want.dwdp_prefetch_bound_SR[0, 0]) == (n == 512)
    assert (cost.prefetch_bound, cost.iterations, cost.comm_s) == (2, 3, 0.0)


def test_kv_contention_adds_the_iterations_bf16_kv_bytes_per_moe_layer_to_the_pull():
    """6000 tokens x 61 layers x (512 + 64) elements x 2 bytes over 58 MoE layers, as extra bytes the rank serves."""
    spec = _spec()
    load, isl = _hand_load([CHUNKS])
    extra = 6000 * 61 * 576 * 2 / 58
    want = pl.iteration_times(spec, load, 4, 0, 0, isl, extra_src_bytes=extra).dwdp_SR[0, 0] * 1e-6
    got = ContextCost(spec, "dwdp", 4, slice_bytes=0, kv_contention=True).seconds([Segments(CHUNKS)])
    assert got == pytest.approx(want, rel=1e-12)
    assert got > ContextCost(spec, "dwdp", 4, slice_bytes=0).seconds([Segments(CHUNKS)])


def test_mtp_over_the_prompt_prices_one_more_moe_layer_and_leaves_the_spec_alone_without_it():
    spec = _spec()
    load, isl = _hand_load([CHUNKS])
    s62 = replace(spec, model=replace(R1, num_layers=62))
    want = pl.iteration_times(s62, load, 8, 0, 2 << 20, isl).dwdp_SR[0, 0] * 1e-6
    assert ContextCost(spec, "dwdp", 8, mtp_prompt=True).seconds([Segments(CHUNKS)]) == pytest.approx(want, rel=1e-12)
    assert ContextCost(spec, "dwdp", 8).spec.model.num_layers == 61


def test_the_price_cache_shares_a_bin_and_prices_a_shape_past_it_on_its_own():
    """Tokens per rank in 32-token bins, the core FLOPs and request length in 1/64 of a doubling, the segment count
    exactly: 8192 and 8200 tokens share a bin (the first one's price); 8240 tokens do not."""
    spec = _spec()

    def fresh(parts):
        return ContextCost(spec, "dwdp", 8).seconds([Segments(parts)])
    cost = ContextCost(spec, "dwdp", 8)
    a = cost.seconds([Segments(((0, 8192, 8192),))])
    assert cost.seconds([Segments(((0, 8200, 8200),))]) == a != fresh(((0, 8200, 8200),))
    assert cost.seconds([Segments(((0, 8240, 8240),))]) == fresh(((0, 8240, 8240),))
    assert cost.iterations == 3
