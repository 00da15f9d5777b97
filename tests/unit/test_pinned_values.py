"""Priced quantities pinned to independent hand computations (never the code path under test), one per decision a
small mutation of the code would silently change: DEP's lock-step (max over ranks), a measured all-to-all bandwidth's
units, the calibrated slice efficiency in the prefetch and in the group pull's contention, interference measured with
copy and compute matched in length, the decode step's KV length, goodput under the TTFT SLO."""
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dwdp_trtllm.cli import main

H200_R1 = ["plan", "--model", "deepseek-r1", "--gpu", "h200", "--dwdp-size", "8", "--isl", "8192", "--mnt", "16384"]


def _rows(capsys, argv) -> list[dict]:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["rows"]


# ---- DEP's ranks run in lock-step: an iteration costs its slowest rank's own work ----------------------------------
def test_dep_iteration_is_the_slowest_rank_not_the_mean(monkeypatch):
    """perf/planner.iteration_times with the layer's parts given by hand: 3 busy ranks of 4 whose own work per MoE
    layer is 1, 5 and 2 us (the fourth idle), dense layers 10/30/20 us, shared experts + communication 7 us per
    layer; 2 dense + 3 MoE layers. DEP = max over busy ranks of (dense + 3 x own) + 3 x 7."""
    from dwdp_trtllm.perf import planner
    from dwdp_trtllm.perf.bench_work import IterationLoad

    own = np.array([[1.0, 5.0, 2.0, 9.0]])
    dense = np.array([[10.0, 30.0, 20.0, 99.0]])
    tokens = np.array([[100.0, 100.0, 100.0, 0.0]])  # rank 3 idle: its (large) numbers must not count
    applied = SimpleNamespace(own_SR=own, experts_dep_S=np.array([4.0]), comm_S=np.array([3.0]),
                              compute_SR=own + 1.0, slowdown_SR=np.ones_like(own), prefetch_us=0.0)
    monkeypatch.setattr(planner, "scenario_phases", lambda *a, **k: {("balanced", "nominal"): SimpleNamespace(
        dense_layer_SR=dense)})
    monkeypatch.setattr(planner, "_layer", lambda *a, **k: (applied, own + 1.0, None))
    monkeypatch.setattr(planner.cm, "prefetch_us", lambda *a, **k: 0.0)
    monkeypatch.setattr(planner, "_placement", lambda *a, **k: None)
    spec = SimpleNamespace(model=SimpleNamespace(first_k_dense=2, num_moe_layers=3), params=lambda: None)
    load = IterationLoad(tokens, tokens, np.zeros_like(tokens), np.ones_like(tokens))
    it = planner.iteration_times(spec, load, 4, 0, 0, 8192.0)
    by_rank = [2 * 10 + 3 * 1, 2 * 30 + 3 * 5, 2 * 20 + 3 * 2]  # 23, 75, 46
    assert it.dep_S.tolist() == [max(by_rank) + 3 * (4 + 3)]  # 96, not the mean's 69.7 (or 91 with the idle rank)
    assert it.dep_comm_S.tolist() == [3 * 3.0]


# ---- a measured all-to-all bandwidth in GB/s (1e9 bytes/s) ---------------------------------------------------------
def _remote_ranks(E: int, k: int, G: int) -> float:
    """Expected other ranks holding at least one of a token's k experts (E experts split evenly over G ranks)."""
    return (G - 1) * (1 - math.comb(E - E // G, k) / math.comb(E, k))


@pytest.mark.parametrize("gbps", [50.0, 500.0])
def test_measured_all_to_all_bandwidth_prices_deepep_dispatch_and_combine(capsys, tmp_path, gbps):
    """TensorRT-LLM's DEP on DeepEP, balanced: each rank sends its 16,384 tokens once per remote rank holding one of
    its 8 experts, FP8 dispatch (1 byte) + BF16 combine (2 bytes) of 7168 values, at the measured rate, plus the
    GPU spec's 20 us fixed cost (h200.yaml a2a_latency_us)."""
    cal = tmp_path / "a2a.json"
    cal.write_text(json.dumps({"gpu": "h200", "all_to_all_gbps": gbps}))
    row = _rows(capsys, [*H200_R1, "--dep", "trtllm", "--dep-comm", "deepep", "--calibration", str(cal)])[0]
    nbytes = 16384 * _remote_ranks(256, 8, 8) * 7168 * (1 + 2)
    assert row["t_all2all_us"] == pytest.approx(nbytes / (gbps * 1e9) * 1e6 + 20.0, rel=1e-9)


def test_measured_all_to_all_bandwidth_prices_deepep_deepgemm(capsys, tmp_path):
    """DeepEP + DeepGEMM at a measured 200 GB/s: dispatch FP8 with one fp32 scale per 128 values, combine BF16, once
    per remote rank (perf/dep_variants.comm_us), no fixed cost and no published fraction of the link."""
    cal = tmp_path / "a2a.json"
    cal.write_text(json.dumps({"gpu": "h200", "all_to_all_gbps": 200.0}))
    row = _rows(capsys, [*H200_R1, "--dep", "deepep_deepgemm", "--calibration", str(cal)])[0]
    H, remote = 7168, _remote_ranks(256, 8, 8)
    nbytes = 16384 * remote * (H + H / 128 * 4) + 16384 * remote * H * 2
    assert row["t_all2all_us"] == pytest.approx(nbytes / 200e9 * 1e6, rel=1e-9)


# ---- the calibrated slice efficiency and contention in the prefetch ------------------------------------------------
def test_prefetch_uses_the_calibrated_slice_efficiency_and_contention(capsys, tmp_path):
    """DWDP8 of R1 FP8: each rank pulls 224 experts of one layer (7 of every 8; 3 x 7168 x 2048 FP8 bytes each plus
    one fp32 scale per 128 x 128 block) at 300 GB/s x the measured 2 MiB slice efficiency 0.6, x the measured sliced
    contention 1.25."""
    cal = tmp_path / "peer.json"
    cal.write_text(json.dumps({"gpu": "h200", "peer_copy_gbps": 300.0, "slice_efficiency": [[2097152, 0.6]],
                               "contention_slowdown": {"sliced": 1.25, "unsliced": 3.0}}))
    row = _rows(capsys, [*H200_R1, "--dep", "trtllm", "--calibration", str(cal)])[0]
    expert = 3 * 7168 * 2048 + 3 * (7168 // 128) * (2048 // 128) * 4
    assert row["t_prefetch_us"] == pytest.approx(224 * expert / (300e9 * 0.6) * 1.25 * 1e6, rel=1e-9)
    unsliced = _rows(capsys, [*H200_R1, "--dep", "trtllm", "--slice-bytes", "0", "--calibration", str(cal)])[0]
    assert unsliced["t_prefetch_us"] == pytest.approx(224 * expert / 300e9 * 3.0 * 1e6, rel=1e-9)


# ---- `dwdp calibrate`: the group pull's contention is over the slice size's own rate ------------------------------
class _LinkTimer:
    """Every rank's pull takes its bytes at PAIR GB/s (one op) or SLICED GB/s (cut in slices), times CONTENTION:
    the group pull's slowdown is CONTENTION exactly when it is measured against the slice size's own rate."""
    PAIR, SLICED, CONTENTION = 400.0, 240.0, 1.3

    def __init__(self, ranks: int):
        self.ranks = ranks

    def time_pulls(self, jobs):
        return [p.total_bytes / ((self.SLICED if p.sliced else self.PAIR) * 1e6) * self.CONTENTION for _, p in jobs]


def test_group_pull_contention_divides_out_the_slice_efficiency():
    from dwdp_trtllm.calibrate.peer import group_pull, summary_keys
    from dwdp_trtllm.core.copy_plan import ExpertLayout

    t = _LinkTimer(4)
    s = 2 << 20
    groups = group_pull(t, ExpertLayout(("w",), (8 << 20,)), 16, (0, s), t.PAIR, {0: t.PAIR, s: t.SLICED})
    assert [g["slowdown"] for g in groups] == pytest.approx([t.CONTENTION, t.CONTENTION], rel=1e-12)
    assert summary_keys([], [], groups)["contention_slowdown"] == pytest.approx(
        {"unsliced": t.CONTENTION, "sliced": t.CONTENTION}, rel=1e-12)


# ---- `dwdp calibrate`: interference with the copy and the compute of matched length --------------------------------
class _OverlapTimer:
    """A copy slows only the compute running beside it, and the other way round: beside a pull of P ms, K ms of
    compute take K + min(K, P) x (S - 1) and the pull P + min(K, P) x (C - 1). Measured with copy and compute of
    equal length, the slowdowns are S and C; a short kernel beside a long pull (or the reverse) reads less."""
    S, C, GBPS = 1.2, 1.5, 400.0

    ranks = 2

    def time_pulls(self, jobs):
        return [p.total_bytes / (self.GBPS * 1e6) for _, p in jobs]

    def time_compute(self, rank, compute, calls):
        return compute.ms * calls

    def time_with_compute(self, jobs, compute, calls):
        k, p = compute.ms * calls, self.time_pulls(jobs)[0]
        both = min(k, p)
        return [p + both * (self.C - 1)], k + both * (self.S - 1)


@pytest.mark.parametrize("kernel_over_pull", [0.25, 3.0])
def test_interference_is_measured_with_copy_and_compute_matched(kernel_over_pull):
    from dwdp_trtllm.calibrate.interference import phase_interference

    t, nbytes, s = _OverlapTimer(), 256 << 20, 2 << 20
    kernel = SimpleNamespace(ms=nbytes / (t.GBPS * 1e6) * kernel_over_pull)
    comp, copy = phase_interference(t, kernel, nbytes, s, max_bytes=64 * nbytes)
    # a short kernel repeated 4 times, or a pull 3x longer in whole slices: equal lengths, the true slowdowns
    assert comp == pytest.approx(t.S, rel=2e-3) and copy == pytest.approx(t.C, rel=2e-3)


# ---- `dwdp size`: the decode step at the running requests' mean KV length, goodput under the TTFT SLO -------------
def test_decode_steps_are_priced_at_the_mean_kv_of_the_decode():
    """One request, ISL 50, OSL 11: its 10 decode steps run over KV lengths 51..60; the run is priced once at its
    middle, 51 + 10 / 2 = 56 (sizing/simulator.py), not at the first token's 51."""
    from dwdp_trtllm.sizing import traffic as tr
    from dwdp_trtllm.sizing.simulator import Deployment, simulate

    seen = []
    a = tr.Arrivals(np.array([0.0]), np.array([50]), np.array([11]), "one")
    simulate(a, Deployment("dwdp", 1, 1, 100, 1, 1, 4), lambda s, segs: 0.5,
             lambda tp, b, kv: seen.append((tp, b, kv)) or 0.02, lambda isl: 0.3)
    assert seen == [(1, 1.0, 56.0)]


def test_decode_cost_grows_with_the_kv_length_it_is_given():
    """The R1 FP8 H200 decode step at 8K + 512 KV is dearer than at the first token's 8K (the MLA core reads every
    cached key): pricing it at the wrong KV moves TPOT."""
    from dwdp_trtllm.sizing.decode_cost import decode_cost
    from dwdp_trtllm.spec.models import PRESETS

    dc = decode_cost(PRESETS["deepseek-r1"], "h200", "fp8")
    assert dc.step_ms(8, 32, 8192 + 512) > dc.step_ms(8, 32, 8192)


def test_goodput_counts_only_requests_within_the_ttft_slo():
    """Four requests in a 10 s window with TTFTs 0.5, 1, 2 and 3 s: a 1.5 s p99 SLO leaves two, 0.2 requests/s."""
    from dwdp_trtllm.sizing.metrics import Slo, summarize
    from dwdp_trtllm.sizing.simulator import SimResult

    arrival = np.array([0.0, 2.0, 4.0, 6.0])
    ttft = np.array([0.5, 1.0, 2.0, 3.0])
    r = SimResult(arrival, arrival + ttft, arrival + ttft, np.full(4, 100), np.ones(4, int), 10.0, 0.0, 0, 0.0)
    assert summarize(r, 1, Slo(ttft_p99_s=1.5)).goodput_rps == pytest.approx(2 / 10)
    assert summarize(r, 1, Slo()).goodput_rps == pytest.approx(4 / 10)
