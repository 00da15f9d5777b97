"""Routing skew end to end on the CPU engine (2 ranks, gloo + shared memory): a functional check, not a benchmark.

- skew on: DEP and DWDP route exactly alike (every request's hidden states equal the reference's, which routes each
  rank's tokens alone), the routed rows follow the target popularity;
- DEP's per-layer expert wait (the slowest rank's expert GEMM, bench/expert_load.py) grows with the skew, DWDP has
  none and its expert GEMM time per layer stays put (same work, only its split over experts moves);
- skew off: outputs bit-exact with a config that never mentions routing_skew.
CPU times here are functional checks of direction, not performance results.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dwdp_trtllm.bench.metrics import compute_metrics
from dwdp_trtllm.spec.config import load_bench_points
from dwdp_trtllm.engine.launcher import run_modes
from dwdp_trtllm.engine.records import Request
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig, dep_expert_skew, popularity_table

REL_TOL_FP32 = 1e-5
#: aiconfigurator's heavier power-law shape; with seed 0 both MoE layers of tiny-vmm at EP2 have a busiest rank
#: ~1.9x the mean (asserted below, so a change of the draw shows up here first)
SKEW = {"kind": "power_law", "alpha": 1.2, "seed": 0}


def _cfg(skew: dict | None, model: str = "tiny-vmm", mnt: int = 256):
    wl = {"max_num_tokens": mnt}
    if skew is not None:
        wl["routing_skew"] = skew
    data = {"model": {"preset": model, "dtype": "float32"}, "dwdp": {"dwdp_size": 2, "weight_dtype": "float32"},
            "workload": wl, "run": {"ranks": 2, "warmup_iters": 1, "timeout_s": 240, "threads_per_rank": 1}}
    return load_bench_points(data)[1][0]


def _requests(n: int, isl: int) -> list[list[Request]]:
    # equal work on both ranks: any DEP wait below comes from routing, not from token imbalance
    return [[Request(request_id=r * 1000 + i, rank=r, isl=isl, arrival_s=0.0) for i in range(n)] for r in range(2)]


def _hidden(results) -> dict[int, torch.Tensor]:
    return {rid: h for res in results for rid, h in res.extra["hidden"].items()}


def _metrics(cfg, out):
    spec = cfg.model.spec()
    sk = cfg.workload.routing_skew
    target = None if sk.off else popularity_table(sk, spec.num_moe_layers, spec.num_experts, spec.top_k)
    return compute_metrics(out, spec.num_layers, None, spec.num_moe_layers, num_experts=spec.num_experts,
                           target_LE=target)


@pytest.mark.slow  # three engine modes with ranks: ~24 s on 2 cores
@pytest.mark.timeout(900)
def test_skew_same_routing_in_every_mode_and_dep_waits_dwdp_does_not():
    spec = _cfg(SKEW).model.spec()
    target = dep_expert_skew(RoutingSkewConfig(**SKEW), spec.num_moe_layers, spec.num_experts, spec.top_k, 2)
    assert (target > 1.7).all(), target
    reqs = _requests(5, 256)
    runs = {}
    for name, skew in (("off", None), ("on", SKEW)):
        cfg = _cfg(skew)
        out = run_modes(cfg, ["reference", "dep", "dwdp"], reqs, collect_outputs=True)
        ref = _hidden(out["reference"])
        for mode in ("dep", "dwdp"):  # the same routing in every mode: the same hidden states
            got = _hidden(out[mode])
            assert sorted(got) == sorted(ref)
            for rid, h in ref.items():
                rel = ((got[rid] - h).norm() / h.norm()).item()
                assert rel <= REL_TOL_FP32, f"skew {name}, {mode} request {rid}: relative error {rel:.2e}"
        runs[name] = (out, _metrics(cfg, out))
    off_h, on_h = _hidden(runs["off"][0]["dwdp"]), _hidden(runs["on"][0]["dwdp"])
    assert any(not torch.equal(off_h[k], on_h[k]) for k in off_h)  # the skew did change the routing

    m_off, m_on = runs["off"][1], runs["on"][1]
    on_dep, off_dep = m_on["dep"]["expert_load"], m_off["dep"]["expert_load"]
    # the routed rows follow the target (the run's pooled counts), identically in DEP and DWDP
    np.testing.assert_allclose(on_dep["rows_max_over_mean_per_layer"], target, rtol=0.1)
    np.testing.assert_allclose(on_dep["target_max_over_mean_per_layer"], target)
    np.testing.assert_allclose(m_on["dwdp"]["expert_load"]["rows_max_over_mean_per_layer"],
                               on_dep["rows_max_over_mean_per_layer"], rtol=0.05)
    assert max(off_dep["rows_max_over_mean_per_layer"]) < 1.3 < min(on_dep["step_rows_max_over_mean_per_layer"])
    # DEP: the slowest rank's expert GEMM sets every layer, the others wait for it. Measured against the same run's
    # own mean expert GEMM (other processes on the machine slow whole runs down, not one mode's ranks apart): at
    # EP2 with time ~ rows, wait / gemm = (busiest - lightest) / (busiest + lightest) rows: ~0.9 on, ~0.1 off
    frac = lambda el: el["expert_wait_us"] / el["expert_gemm_us"]
    assert frac(on_dep) > max(0.3, frac(off_dep) + 0.25), (frac(on_dep), frac(off_dep))
    # DWDP: no rank waits for another; its expert GEMM does the same work per token (against the same run's
    # attention, which the skew does not touch)
    dw_on, dw_off = m_on["dwdp"]["expert_load"], m_off["dwdp"]["expert_load"]
    assert "expert_wait_us" not in dw_on and "expert_wait_us" not in dw_off
    per_attn = lambda m: m["dwdp"]["expert_load"]["expert_gemm_us"] / m["dwdp"]["layer_us"]["attention"]
    assert per_attn(m_on) < 1.5 * per_attn(m_off), (per_attn(m_on), per_attn(m_off))
    print("\nDEP wait/gemm off %.2f on %.2f; DWDP gemm/attention off %.2f on %.2f"
          % (frac(off_dep), frac(on_dep), per_attn(m_off), per_attn(m_on)))


@pytest.mark.timeout(900)
def test_skew_off_is_bit_exact():
    reqs = _requests(2, 40)
    a = run_modes(_cfg(None, model="tiny", mnt=48), ["reference", "dwdp"], reqs, collect_outputs=True)
    b = run_modes(_cfg({"kind": "none", "alpha": 2.0, "seed": 5}, model="tiny", mnt=48), ["reference", "dwdp"], reqs,
                  collect_outputs=True)
    c = run_modes(_cfg({"kind": "zipf", "alpha": 1.0}, model="tiny", mnt=48), ["reference"], reqs,
                  collect_outputs=True)
    for mode in ("reference", "dwdp"):
        ha, hb = _hidden(a[mode]), _hidden(b[mode])
        assert all(torch.equal(ha[k], hb[k]) for k in ha)
    hc = _hidden(c["reference"])
    assert any(not torch.equal(hc[k], _hidden(a["reference"])[k]) for k in hc)
