"""perf/dep_variants.py (DeepEP + DeepGEMM DEP) pinned to hand computations from the published rates its docstring
cites: DeepGEMM's grouped GEMM 1346 / 1214 TFLOPS with 128-row padding, DeepEP's dispatch / combine at 153 / 158 of
160 GB/s of the link (or a measured all-to-all bandwidth at face value, in GB/s = 1e9 bytes/s), the published 8xH200
layer (Mega MoE 2.09 / 3.87 / 7.49 ms x 1.205) as the slow end. The model, GPU and phases are stand-ins with the
numbers written here, so every expected value is arithmetic on this page."""
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from dwdp_trtllm.perf import dep_variants as dv

R1 = SimpleNamespace(name="deepseek-r1", hidden_size=7168, moe_intermediate=2048, num_experts=256, top_k=8)
OTHER = SimpleNamespace(name="other-moe", hidden_size=4096, moe_intermediate=1536, num_experts=128, top_k=8)
LINK = 400e9  # the stand-in GPU's achievable peer bandwidth at 8 ranks, bytes/s (other group sizes: LINKS)
LINKS = {2: 100e9, 3: 200e9, 4: LINK, 8: LINK}


def _remote(E, k, G):  # other ranks holding at least one of a token's k experts, E split evenly over G
    return (G - 1) * (1 - math.comb(E - E // G, k) / math.comb(E, k))


def _experts_us(rows, local, H, I):
    padded = rows + local * 127 / 2  # half a 128-row block of padding per local expert
    return (2 * padded * H * 2 * I / 1346e12 + 2 * padded * I * H / 1214e12) * 1e6


def _comm_us(tok, remote, H, bw, measured=False):
    d, c = (1.0, 1.0) if measured else (153 / 160, 158 / 160)
    return (tok * remote * (H + H / 128 * 4) / (bw * d) + tok * remote * 2 * H / (bw * c)) * 1e6


@dataclass(frozen=True)
class _Ph:  # the fields deepep_deepgemm reads and replaces (perf/phases.Phases has them too)
    experts_dep_S: np.ndarray
    comm_S: np.ndarray
    comm_alt_S: np.ndarray
    beyond: dict = field(default_factory=dict)
    beyond_dep_S: float = 0.7
    comm_source: str = "trtllm"


def _spec(model=R1, gpu="h200", gbps=None, dtype="fp8", tables=True):
    g = SimpleNamespace(name=gpu, peer_bytes_per_s_for=lambda group: LINKS[group])
    return SimpleNamespace(model=model, gpu=g, calibration=SimpleNamespace(all_to_all_gbps=gbps),
                           weight_dtype=dtype, tables=object() if tables else None)


def test_which_dep_variants_a_plan_prices():
    assert dv.applies(_spec(gpu="h100")) and dv.applies(_spec(gpu="h200"))
    assert not dv.applies(_spec(gpu="b200")) and not dv.applies(_spec(dtype="bf16"))
    assert not dv.applies(_spec(tables=False))
    assert dv.variants(_spec(), None) == ("trtllm", "deepep_deepgemm")
    assert dv.variants(_spec(gpu="b200"), None) == ("trtllm",)
    assert dv.variants(_spec(gpu="b200"), "deepep_deepgemm") == ("deepep_deepgemm",)


def test_deepgemm_grouped_gemm_time():
    # 16,000 rows over 32 local experts of DeepSeek's 7168 x 2048 shapes: 18,032 padded rows
    padded = 16000 + 32 * 63.5
    want = (2 * padded * 7168 * 4096 / 1346e12 + 2 * padded * 2048 * 7168 / 1214e12) * 1e6
    assert dv.experts_us(R1, np.array([16000.0]), 32) == pytest.approx([want], rel=1e-12)


def test_deepep_dispatch_and_combine_published_fraction_and_measured():
    tokens = np.array([[1000.0, 4000.0, 2000.0, 3000.0]])  # the busiest rank (4000 tokens) sets the time
    remote = _remote(256, 8, 4)
    want = (4000 * remote * (7168 + 7168 / 128 * 4) / (LINK * 153 / 160)
            + 4000 * remote * 7168 * 2 / (LINK * 158 / 160))
    assert dv.comm_us(R1, _spec().gpu, tokens, 4) == pytest.approx([want * 1e6], rel=1e-12)
    at = 120e9  # measured: the whole rate, no published fraction, not the GPU's link
    want_m = 4000 * remote * (7168 + 7168 / 128 * 4) / at + 4000 * remote * 7168 * 2 / at
    assert dv.comm_us(R1, _spec().gpu, tokens, 4, at) == pytest.approx([want_m * 1e6], rel=1e-12)


def test_published_8xh200_layer_interpolated_and_extrapolated():
    us, doublings = dv.anchor_us(np.array([1024.0, 2048.0, 3072.0, 8192.0, 16384.0]))
    slope = (7.49 - 3.87) / 4096  # ms per token past 8K
    want_ms = [2.09, 2.09, (2.09 + 3.87) / 2, 7.49, 7.49 + slope * 8192]
    assert us == pytest.approx([x * 1.205 * 1e3 for x in want_ms], rel=1e-12)
    assert doublings == pytest.approx([0.0, 0.0, 0.0, 0.0, 1.0])


def test_deepep_deepgemm_on_8_h200_components_and_the_published_slow_end():
    tokens = np.array([[1000.0, 3000.0, 2000.0, 2000.0, 1000.0, 1000.0, 2000.0, 4000.0]])  # 16,000 tokens
    ph = _Ph(np.array([9e9]), np.array([9e9]), np.array([9e9]),
             beyond={"routed experts (DEP, fp8)": 1.0, "DEP communication": 2.0, "attention": 0.5})
    out = dv.deepep_deepgemm(_spec(), ph, tokens, 8)
    experts = _experts_us(16000 * 8 / 8, 32, 7168, 2048)
    comm = _comm_us(4000, _remote(256, 8, 8), 7168, LINK)
    anchor = (2.09 + (4000 - 2048) / 2048 * (3.87 - 2.09)) * 1.205 * 1e3  # busiest rank's 4000 tokens, us
    slow = max(anchor - experts, comm)
    assert out.experts_dep_S == pytest.approx([experts], rel=1e-12)
    assert out.comm_S == pytest.approx([slow], rel=1e-12)
    assert out.comm_alt_S == pytest.approx([min(slow, comm)], rel=1e-12)
    assert out.beyond == {"attention": 0.5} and out.beyond_dep_S == 0.0
    assert out.comm_source == (
        "deepep_deepgemm: DeepGEMM grouped GEMM 1346/1214 TFLOPS (DeepGEMM README) + DeepEP normal dispatch/combine "
        "at 0.96/0.99 of the peer link (DeepEP legacy.md); slow end: the published 8xH200 DeepEP + grouped GEMM "
        "layer (1.205 x DeepGEMM Mega MoE)")


def test_deepep_deepgemm_past_8k_tokens_marks_the_anchor_extrapolated_and_skew_scales_rows():
    tokens = np.full((1, 8), 16384.0)
    ph = _Ph(np.array([0.0]), np.array([0.0]), np.array([0.0]))
    out = dv.deepep_deepgemm(_spec(), ph, tokens, 8, skew_factor=1.5)
    experts = _experts_us(16384 * 8 * 8 / 8 * 1.5, 32, 7168, 2048)
    anchor = (7.49 + (7.49 - 3.87) / 4096 * (16384 * 1.5 - 8192)) * 1.205 * 1e3
    assert out.experts_dep_S == pytest.approx([experts], rel=1e-12)
    assert out.comm_S == pytest.approx([max(anchor - experts, _comm_us(16384, _remote(256, 8, 8), 7168, LINK))],
                                       rel=1e-12)
    assert out.beyond == {"DEP communication": pytest.approx(math.log2(16384 * 1.5 / 8192))}


def test_deepep_deepgemm_measured_bandwidth_and_other_gpus_have_no_anchor():
    tokens = np.full((1, 8), 2000.0)
    ph = _Ph(np.array([0.0]), np.array([0.0]), np.array([0.0]))
    m = dv.deepep_deepgemm(_spec(gbps=200.0), ph, tokens, 8)  # measured: at face value in GB/s, not anchored
    comm = _comm_us(2000, _remote(256, 8, 8), 7168, 200e9, measured=True)
    assert m.comm_S == pytest.approx([comm], rel=1e-12) and m.comm_alt_S == pytest.approx([comm], rel=1e-12)
    assert m.comm_source.endswith("at the measured all-to-all bandwidth 200 GB/s (calibration)")
    h100 = dv.deepep_deepgemm(_spec(gpu="h100"), ph, tokens, 8)  # no published H100 layer: the components
    comm_h = _comm_us(2000, _remote(256, 8, 8), 7168, LINK)
    assert h100.comm_S == pytest.approx([comm_h], rel=1e-12) and h100.comm_alt_S == pytest.approx([comm_h], rel=1e-12)
    g4 = dv.deepep_deepgemm(_spec(), ph, np.full((1, 4), 2000.0), 4)  # the anchor is 8 ranks'
    assert g4.comm_S == pytest.approx([_comm_us(2000, _remote(256, 8, 4), 7168, LINK)], rel=1e-12)
    assert g4.experts_dep_S == pytest.approx([_experts_us(2000 * 4 * 8 / 4, 64, 7168, 2048)], rel=1e-12)


def test_deepep_deepgemm_other_shapes_range_up_to_trtllms_op():
    tokens = np.full((1, 8), 2000.0)
    experts = _experts_us(2000 * 8 * 8 / 8, 16, 4096, 1536)
    comm = _comm_us(2000, _remote(128, 8, 8), 4096, LINK)
    slow_op = np.array([experts + comm + 500.0])  # TensorRT-LLM's op + comm, slower than the components by 500 us
    ph = _Ph(slow_op - 100.0, np.array([100.0]), np.array([0.0]))
    out = dv.deepep_deepgemm(_spec(model=OTHER), ph, tokens, 8)
    assert out.comm_S == pytest.approx([comm], rel=1e-12)
    assert out.comm_alt_S == pytest.approx([comm + 500.0], rel=1e-9)
    assert out.comm_source.startswith("deepep_deepgemm: DeepGEMM grouped GEMM 1346/1214 TFLOPS")
    assert out.comm_source.endswith("; rates of DeepSeek-V3 shapes (none published for other-moe's), range up to "
                                    "TensorRT-LLM's op + comm")
    fast_op = _Ph(np.array([1.0]), np.array([1.0]), np.array([0.0]))  # never below the components
    assert dv.deepep_deepgemm(_spec(model=OTHER), fast_op, tokens, 8).comm_alt_S == pytest.approx([comm], rel=1e-12)


def test_one_rank_has_no_dispatch():
    ph = _Ph(np.array([5.0]), np.array([0.0]), np.array([0.0]))
    out = dv.deepep_deepgemm(_spec(), ph, np.array([[4096.0]]), 1)
    assert out.experts_dep_S.tolist() == [5.0] and out.comm_source == "deepep_deepgemm: one rank, no dispatch"


def test_uneven_groups_round_local_experts_up_and_two_ranks_dispatch():
    ph = _Ph(np.array([0.0]), np.array([0.0]), np.array([0.0]))
    three = dv.deepep_deepgemm(_spec(gpu="h100"), ph, np.full((1, 3), 900.0), 3)
    assert three.experts_dep_S == pytest.approx([_experts_us(900 * 3 * 8 / 3, 86, 7168, 2048)], rel=1e-12)  # 256/3
    assert three.comm_S == pytest.approx([_comm_us(900, _remote(256, 8, 3), 7168, 200e9)], rel=1e-12)
    two = dv.deepep_deepgemm(_spec(gpu="h100"), ph, np.full((1, 2), 900.0), 2)
    assert two.comm_S == pytest.approx([_comm_us(900, _remote(256, 8, 2), 7168, 100e9)], rel=1e-12)


def test_the_anchor_is_read_per_sample():
    # two samples: the busiest rank has 2048 tokens in the first, 8192 in the second
    tokens = np.array([[2048.0] * 8, [1024.0] * 7 + [8192.0]])
    ph = _Ph(np.zeros(2), np.zeros(2), np.zeros(2))
    out = dv.deepep_deepgemm(_spec(), ph, tokens, 8)
    experts = [_experts_us(r * 8 / 8, 32, 7168, 2048) for r in (2048 * 8, 1024 * 7 + 8192)]
    comm = [_comm_us(t, _remote(256, 8, 8), 7168, LINK) for t in (2048, 8192)]
    anchor = [2.09 * 1.205e3, 7.49 * 1.205e3]
    assert out.comm_S == pytest.approx([max(a - e, c) for a, e, c in zip(anchor, experts, comm)], rel=1e-12)
