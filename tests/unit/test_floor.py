"""The stock-kernel floor (bench/floor.py): which work each mode's rank is charged with, and `dwdp bench --floor`
on the real engine (CPU): every mode gets floor / measured / efficiency per phase, in results.json and the table."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dwdp_trtllm.bench.floor import Batch, FloorTimer, rank_batches
from dwdp_trtllm.engine.records import IterationRecord, RankResult, Segment
from dwdp_trtllm.spec.models import get_model

ROOT = Path(__file__).resolve().parents[2]


def _rank(rank, mode, counts, segs, warmup=False):
    its = [IterationRecord(rank=rank, iteration=0, t_start=0.0, t_end=1.0, num_tokens=sum(s.length for s in segs),
                           segments=segs, warmup=warmup, expert_counts=counts)]
    return RankResult(rank=rank, mode=mode, device="cpu", t0=0.0, requests=[], iterations=its, first_token_s={},
                      memory_bytes={})


def test_rank_batches_dep_sums_what_every_rank_routed_to_its_experts():
    spec = get_model("tiny")  # 8 experts
    E = spec.num_experts
    c0 = [[1] * E for _ in range(spec.num_moe_layers)]
    c1 = [list(range(E)) for _ in range(spec.num_moe_layers)]
    segs = [Segment(0, 5, 7, True)]
    dep = rank_batches({"dep": [_rank(0, "dep", c0, segs), _rank(1, "dep", c1, segs)]}, spec)["dep"]
    (_, _, b0), (_, _, b1) = dep
    half = E // 2
    assert b0.rows_per_expert[0] == tuple(1 + e for e in range(half))  # rank 0 owns experts [0, E/2)
    assert b1.rows_per_expert[0] == tuple(1 + e for e in range(half, E))
    assert b0.segments == ((5, 7),)  # (cached prefix, chunk length)
    dwdp = rank_batches({"dwdp": [_rank(0, "dwdp", c1, segs), _rank(1, "dwdp", c0, segs, warmup=True)]}, spec)["dwdp"]
    assert len(dwdp) == 1 and dwdp[0][2].rows_per_expert[0] == tuple(range(E))  # own pairs over all experts; warm-up left out


def test_floor_timer_grows_with_the_work():
    spec = get_model("tiny")
    t = FloorTimer(spec, torch.float32, "float32", torch.device("cpu"), warmup=1, reps=3)
    E = spec.num_experts
    small = t.iteration_ms(Batch(((0, 16),), tuple((2,) * E for _ in range(spec.num_moe_layers))))
    big = t.iteration_ms(Batch(((0, 512), (256, 512)), tuple((256,) * E for _ in range(spec.num_moe_layers))))
    for k in ("attention", "expert_gemm", "other"):
        assert 0 < small[k] < big[k], k
    assert abs(big["total"] - big["attention"] - big["expert_gemm"] - big["other"]) < 1e-9


def test_iteration_flops_are_the_planners_counts():
    """The floor's FLOPs are perf/flops.py's (what validate-plan rebuilds, perf/bench_work.floor_flops): one
    iteration of two segments, one with a cached prefix, every routed pair of its own tokens (top_k rows each)."""
    import numpy as np

    from dwdp_trtllm.perf.bench_work import IterationLoad, floor_flops
    from dwdp_trtllm.perf.flops import core_flops

    for preset in ("tiny", "deepseek-r1", "qwen3-30b-a3b"):
        spec = get_model(preset, 3, 1) if preset == "deepseek-r1" else get_model(preset)
        segs = ((0, 48), (96, 32))
        T, S = 80, 176
        E = spec.num_experts
        rows = tuple(tuple(T * spec.top_k // E + (e < T * spec.top_k % E) for e in range(E)) for _ in range(spec.num_moe_layers))
        mine = FloorTimer(spec, torch.float32, "bf16", torch.device("cpu")).iteration_flops(Batch(segs, rows))
        load = IterationLoad(np.array([[T]]), np.array([[S]]), np.array([[sum(float(core_flops(spec, n, p)) for p, n in segs)]]),
                             np.array([[2]]))
        want = floor_flops(spec, load)
        for k, v in want.items():
            assert mine[k] == pytest.approx(v, rel=1e-12), (preset, k)
        assert mine["attention"] == pytest.approx(mine["attention_proj"] + mine["attention_core"], rel=1e-12)


@pytest.mark.slow  # the real engine plus the floor: ~15 s on 2 cores
@pytest.mark.timeout(900)
def test_bench_floor_on_the_real_engine(tmp_path, capsys):
    """The floor's plumbing on the real engine (the CLI refuses --floor on a CPU: the numbers mean nothing there,
    tests/unit/test_bench_newcomer.py; run_bench still runs it for this check)."""
    from dwdp_trtllm.bench.runner import run_bench

    out = tmp_path / "bench"
    assert run_bench(ROOT / "configs/bench/ci_smoke.yaml", out_dir=out, floor=True, plots=False)["consistent"]
    printed = capsys.readouterr().out
    assert "stock-kernel floor" in printed
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    for mode in ("dep", "dwdp"):
        f = run["floor"][mode]
        assert f["iterations"] == sum(1 for _ in range(run["metrics"][mode]["busy_iterations"]))
        for k in ("attention", "expert_gemm", "other", "total"):
            assert f["floor_ms"][k] > 0 and f["measured_ms"][k] > 0
            assert f["efficiency"][k] == pytest.approx(f["floor_ms"][k] / f["measured_ms"][k])
        assert {"all_to_all", "sync_wait", "prefetch_wait"} <= set(f["measured_ms"])  # the rest of the wall, same iterations


def test_attention_passes_are_counted_and_grow_with_the_keys():
    """The memory passes between the attention's stock kernels (RoPE, MLA's key assembly; o_proj's input
    quantisation with FP8 linears on CUDA) are part of the attention floor and reported apart: attention =
    projections + core + passes, and MLA's key assembly grows with the cached keys at the same queries."""
    spec = get_model("tiny")  # MLA
    t = FloorTimer(spec, torch.float32, "float32", torch.device("cpu"), warmup=1, reps=3)
    rows = tuple((4,) * spec.num_experts for _ in range(spec.num_moe_layers))
    layer = t.attention_layer_ms(((0, 64), (32, 64)))
    assert layer["passes"] > 0
    t.attention_layer_ms = lambda segments: {"projections": 1.0, "core": 2.0, "passes": 0.5}
    f = t.iteration_ms(Batch(((0, 64), (32, 64)), rows))
    assert f["attention_passes"] == pytest.approx(0.5 * spec.num_layers)
    assert f["attention"] == pytest.approx(3.5 * spec.num_layers)
    assert f["attention_core"] == pytest.approx(2.0 * spec.num_layers)
    few, many = (min(t.attention_passes_ms(128, s) for _ in range(3)) for s in (128, 128 + 8192))
    assert many > few
