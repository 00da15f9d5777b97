"""bench/expert_load.py arithmetic on hand-made RankResults (expected values worked out in the comments)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dwdp_trtllm.bench.expert_load import mode_expert_load
from dwdp_trtllm.engine.records import IterationRecord, RankResult


def _it(rank, i, counts, gemm_us, warmup=False, wait_us=(0.0, 0.0)):
    phases = []
    t = 0.0
    for m, g in enumerate(gemm_us):
        phases.append(("expert_gemm", m, t, t + g * 1e-6))
        t += g * 1e-6
        phases.append(("sync_wait", m, t, t + wait_us[m] * 1e-6))
    return IterationRecord(rank=rank, iteration=i, t_start=0.0, t_end=1.0, num_tokens=4, segments=[],
                           warmup=warmup, phases=phases, expert_counts=counts)


def _rank(rank, mode, its):
    return RankResult(rank=rank, mode=mode, device="cpu", t0=0.0, requests=[], iterations=its,
                      first_token_s={}, memory_bytes={})


def _two_ranks(mode):
    # 4 experts, 2 MoE layers, 2 ranks; DEP blocks: rank 0 experts {0, 1}, rank 1 experts {2, 3}
    r0 = _rank(0, mode, [
        _it(0, 0, [[9, 9, 9, 9], [9, 9, 9, 9]], [999, 999], warmup=True),  # warm-up: ignored
        _it(0, 1, [[3, 1, 0, 0], [1, 1, 1, 1]], [100, 50], wait_us=(10, 20)),
        _it(0, 2, [[2, 2, 0, 0], [0, 0, 2, 2]], [300, 50]),
    ])
    r1 = _rank(1, mode, [
        _it(1, 0, [[9, 9, 9, 9], [9, 9, 9, 9]], [999, 999], warmup=True),
        _it(1, 1, [[3, 1, 0, 0], [1, 1, 1, 1]], [200, 50], wait_us=(30, 40)),
        _it(1, 2, [[0, 0, 2, 2], [0, 0, 2, 2]], [100, 150]),
    ])
    return [r0, r1]


def test_dep_expert_load():
    el = mode_expert_load(_two_ranks("dep"), "dep", 4, 2)
    assert el["ep_size"] == 2
    # pooled layer 0: experts [8, 4, 2, 2] -> ranks [12, 4] -> 12 / 8 = 1.5; layer 1: [2, 2, 6, 6] -> [4, 12] -> 1.5
    assert el["rows_max_over_mean_per_layer"] == pytest.approx([1.5, 1.5])
    # per step, layer 0: it 1 [6, 2, 0, 0] -> [8, 0] -> 2.0; it 2 [2, 2, 2, 2] -> 1.0; mean 1.5
    # layer 1: it 1 [2, 2, 2, 2] -> 1.0; it 2 [0, 0, 4, 4] -> 2.0; mean 1.5
    assert el["step_rows_max_over_mean_per_layer"] == pytest.approx([1.5, 1.5])
    # expert wait, layer 0: it 1 gemms (100, 200) -> waits (100, 0); it 2 (300, 100) -> (0, 200); mean 75
    # layer 1: it 1 (50, 50) -> 0; it 2 (50, 150) -> (100, 0); mean 25
    assert el["expert_wait_us_per_layer"] == pytest.approx([75.0, 25.0])
    assert el["expert_wait_us"] == pytest.approx(50.0)
    assert el["expert_gemm_us_per_layer"] == pytest.approx([175.0, 75.0])
    assert el["sync_wait_us_per_layer"] == pytest.approx([10.0, 15.0])  # (10 + 30 + 0 + 0) / 4, (20 + 40) / 4
    assert "prefetch_wait_us_per_layer" not in el and "target_max_over_mean" not in el


def test_dwdp_has_no_expert_wait_and_target_is_reported():
    target = np.array([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    el = mode_expert_load(_two_ranks("dwdp"), "dwdp", 4, 2, target)
    assert "expert_wait_us_per_layer" not in el and "sync_wait_us_per_layer" not in el
    assert el["prefetch_wait_us_per_layer"] == [0.0, 0.0]
    assert el["rows_max_over_mean_per_layer"] == pytest.approx([1.5, 1.5])  # the same routing, the same split
    assert math.isnan(el["step_rows_max_over_mean"])  # lock-step steps are DEP's
    assert el["target_max_over_mean_per_layer"] == pytest.approx([1.6, 1.0])  # [0.8, 0.2] -> 0.8 / 0.5


def test_nothing_recorded_is_nan():
    r = _rank(0, "dep", [_it(0, 0, None, [1.0, 1.0])])
    el = mode_expert_load([r], "dep", 4, 2)
    assert all(math.isnan(x) for x in el["rows_max_over_mean_per_layer"])
