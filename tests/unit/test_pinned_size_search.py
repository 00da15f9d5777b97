"""sizing/search.py's decisions pinned on hand-made runs: the binding constraint (context side at half the GPUs or
more; DWDP prefetch-bound past half its iterations; KV transfer past a tenth of a request's decode time), which SLO
a run misses first and the refusal naming it, which miss is reported, the KV transfer time's units."""
import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from dwdp_trtllm.deploy.memory import kv_cache_floor_bytes
from dwdp_trtllm.sizing import search as se
from dwdp_trtllm.sizing.metrics import Metrics, Slo
from dwdp_trtllm.spec.models import PRESETS


def _m(**kw):
    base = dict(ttft_p50_s=1.0, ttft_p99_s=2.0, tpot_s=0.05, tps_user=20.0, output_tps_per_gpu=1.0,
                goodput_rps=1.0, requests=10, completed=10)
    return Metrics(**{**base, **kw})


def _binding(ctx_gpus, gpus, group=4, mode="dwdp", iterations=10, prefetch_bound=0, slo=Slo(), kv_s=0.0,
             tpot=0.01, osl=(100, 100)):
    d = NS(ctx_gpus=ctx_gpus, gpus=gpus, ctx_group=group, mode=mode)
    r = NS(kv_s=kv_s, isl=np.ones(len(osl)), osl=np.asarray(osl, float))
    return se._binding(NS(slo=slo), d, r, NS(iterations=iterations, prefetch_bound=prefetch_bound), NS(tpot_s=tpot))


def test_binding_context_side_from_half_the_gpus():
    assert _binding(4, 8) == "memory (one group of 4 GPUs: the smallest context side that fits)"  # 4 of 8: half
    assert _binding(8, 16, prefetch_bound=6) == "prefetch (DWDP iterations wait on the expert copies)"
    assert _binding(8, 16, prefetch_bound=5) == "context compute (keeping up with the offered tokens)"  # not past half
    assert _binding(8, 16, prefetch_bound=6, mode="dep") == "context compute (keeping up with the offered tokens)"
    assert _binding(8, 16, iterations=0) == "context compute (keeping up with the offered tokens)"
    assert _binding(8, 16, slo=Slo(ttft_p99_s=2.0)) == "context compute (TTFT SLO)"
    assert _binding(8, 16, slo=Slo(ttft_p50_s=2.0)) == "context compute (TTFT SLO)"


def test_binding_generation_side_and_kv_transfer():
    # 4 context GPUs of 12: the generation side. A request decodes 100 tokens at 10 ms: 1 s; KV binds past 0.1 s
    assert _binding(4, 12, kv_s=2 * 0.1) == "generation (decode throughput)"  # 0.1 s per request: not past
    assert _binding(4, 12, kv_s=2 * 0.11) == "KV transfer"
    assert _binding(4, 12, kv_s=2 * 0.11, osl=(100, 300)) == "generation (decode throughput)"  # mean OSL 200: 2 s
    assert _binding(4, 12, kv_s=2 * 0.11, tpot=0.0) == "generation (decode throughput)"
    assert _binding(4, 12, slo=Slo(tps_user=10.0)) == "generation (TPS/user SLO and decode throughput)"
    assert _binding(5, 12, group=5) == "generation (decode throughput)"  # below half


def test_first_slo_missed_in_order_p99_p50_tps_user():
    slo = Slo(ttft_p50_s=1.0, ttft_p99_s=2.0, tps_user=20.0)
    assert se._slo_miss(_m(), slo) is None  # every target met exactly
    assert se._slo_miss(_m(ttft_p99_s=2.5, ttft_p50_s=1.5), slo) == ("--ttft-p99", 2.0, 2.5)
    assert se._slo_miss(_m(ttft_p50_s=1.5), slo) == ("--ttft-p50", 1.0, 1.5)
    assert se._slo_miss(_m(tps_user=19.0), slo) == ("--tps-user", 20.0, 19.0)
    got = se._slo_miss(_m(ttft_p99_s=math.inf), slo)
    assert got == ("--ttft-p99", 2.0, math.inf)
    assert se._slo_miss(_m(tps_user=math.nan), Slo(tps_user=1.0))[0] == "--tps-user"
    assert se._slo_miss(_m(ttft_p99_s=99.0), Slo(tps_user=1.0)) is None


def test_why_missed_names_the_slo_the_unfinished_or_the_budget():
    slo = Slo(ttft_p99_s=2.0, tps_user=20.0)
    assert se.why_missed(_m(ttft_p99_s=3.14159), slo, 16, "context side", None) == \
        "no context side meets --ttft-p99 2 s; the fastest reaches 3.14 s"
    assert se.why_missed(_m(tps_user=12.345), slo, 16, "generation side", None) == \
        "no generation side meets --tps-user 20 tokens/s; the best reaches 12.3 tokens/s"
    assert se.why_missed(_m(completed=7), slo, 16, "context side", 8) == \
        "no context side within --gpu-budget 16 finishes every request (the best left 3 of 10 unfinished)"
    assert se.why_missed(None, slo, 16, "context side", 24) == \
        "context side: the smallest that fits makes 24 GPUs in all, more than --gpu-budget 16"
    assert se.why_missed(None, slo, 16, "context side", 16) == "no context side within --gpu-budget 16 meets the SLOs"
    assert se.why_missed(_m(), slo, 16, "context side", None) == "no context side within --gpu-budget 16 meets the SLOs"


def test_the_reported_miss_is_the_run_closest_to_the_slos():
    slo = Slo()
    assert se._closer(_m(), None, slo)
    assert se._closer(_m(completed=9), _m(completed=8), slo)  # more finished first
    assert not se._closer(_m(completed=8, ttft_p99_s=0.1), _m(completed=9), slo)
    assert se._closer(_m(ttft_p99_s=1.5), _m(ttft_p99_s=2.0, ttft_p50_s=0.1), slo)  # then TTFT p99
    assert se._closer(_m(ttft_p50_s=0.5), _m(), slo)  # then p50
    assert se._closer(_m(tps_user=30.0), _m(), slo) and not se._closer(_m(), _m(), slo)  # then TPS/user
    assert se._closer(_m(tps_user=1.0), _m(tps_user=math.nan), slo)


def test_kv_transfer_time_in_gb_per_s():
    r1 = PRESETS["deepseek-r1"]
    p = NS(spec=NS(model=r1), kv_gbps=50.0)
    assert se.Problem.kv_time(p, 8192) == pytest.approx(kv_cache_floor_bytes(r1, 8192) / 50e9, rel=1e-12)
    assert se.DEFAULT_KV_GBPS == 50.0


def test_modes_and_sizes():
    p = NS(dwdp_sizes=(4,), dep_sizes=(8,), tp_sizes=())
    assert [se.Problem.sizes(p, m) for m in se.MODES] == [(4,), (8,), ()]
    assert se.modes(NS(sizes=lambda m: {"dwdp": (4,), "dep": (8,), "tp": ()}[m])) == ("dwdp", "dep")
    assert se.modes(NS(sizes=lambda m: (2,))) == ("dwdp", "dep", "tp")
    arrivals = NS(closed_users=0, isl=np.array([1000, 3000]), duration_s=4.0)
    assert se._offered_tokens_per_s(arrivals) == 1000.0
    assert math.isnan(se._offered_tokens_per_s(NS(closed_users=8, isl=np.array([1]), duration_s=1.0)))


def test_finished_share_compares_runs_of_different_sizes_and_one_request_kv():
    # one request of one finished (100%) beats 9 of 10 (90%), whatever the counts' product
    assert se._closer(_m(requests=1, completed=1), _m(requests=10, completed=9), Slo())
    assert not se._closer(_m(requests=10, completed=9), _m(requests=1, completed=1), Slo())
    # a one-request run: its whole KV time (0.11 s) against a tenth of its 1 s decode
    assert _binding(4, 12, kv_s=0.11, osl=(100,)) == "KV transfer"
