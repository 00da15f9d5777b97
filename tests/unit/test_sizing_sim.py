"""`dwdp size`'s simulator: closed forms, determinism, traffic files and a real (CPU) bench run."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.perf import planner as pl
from dwdp_trtllm.perf.bench_work import IterationLoad
from dwdp_trtllm.perf.flops import core_flops
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.spec.schema import ConfigError
from dwdp_trtllm.sizing import traffic as tr
from dwdp_trtllm.sizing.context_cost import ContextCost, Segments
from dwdp_trtllm.sizing.decode_cost import decode_cost
from dwdp_trtllm.sizing.metrics import Slo, summarize
from dwdp_trtllm.sizing.simulator import Deployment, simulate


def _md1(rate: float, service: float, n_s: float, seed: int):
    a = tr.generate(tr.Traffic(tr.LengthDist(100), tr.LengthDist(1), rate=rate, duration_s=n_s, seed=seed))
    d = Deployment("dwdp", 1, 1, 100, 1, 1, 1)  # MNT = ISL: one request per iteration
    r = simulate(a, d, lambda s, segs: service, lambda tp, b, kv: 0.0, lambda isl: 0.0)
    return float(np.mean(r.first_token_s - r.arrival_s)) - service


@pytest.mark.parametrize("rho", [0.3, 0.7])
def test_one_server_fixed_service_matches_md1_mean_wait(rho):
    """M/D/1: Poisson arrivals, fixed service 1/mu: mean wait rho / (2 mu (1 - rho)) (Pollaczek-Khinchine)."""
    service = 0.1
    rate = rho / service
    want = rho / (2 * (1 / service) * (1 - rho))
    got = np.mean([_md1(rate, service, 4000.0, seed) for seed in range(3)])
    assert got == pytest.approx(want, rel=0.06)


def test_md1_wait_grows_with_load():
    """Sanity of the closed form's shape: doubling the load more than doubles the wait."""
    assert _md1(7.0, 0.1, 2000.0, 0) > 3 * _md1(3.0, 0.1, 2000.0, 0)


def test_lockstep_server_waits_for_its_slowest_rank():
    """A DEP server of 2 ranks starts and ends every iteration together: its iteration takes the time ctx_time gives
    for both ranks' segments at once, and a request on the light rank waits for the heavy one."""
    a = tr.Arrivals(np.array([0.0, 0.0]), np.array([100, 10]), np.array([1, 1]), "two")
    seen = []

    def ctx(s, segs):
        seen.append([x.tokens for x in segs])
        return 0.001 * max(x.tokens for x in segs)
    r = simulate(a, Deployment("dep", 2, 1, 1000, 1, 1, 1), ctx, lambda *_: 0.0, lambda isl: 0.0)
    assert seen == [[100, 10]]
    assert list(r.first_token_s) == pytest.approx([0.1, 0.1])
    free = simulate(a, Deployment("dwdp", 2, 2, 1000, 1, 1, 1), lambda s, segs: 0.001 * segs[0].tokens,
                    lambda *_: 0.0, lambda isl: 0.0)
    assert sorted(free.first_token_s) == pytest.approx([0.01, 0.1])  # free-running: the light one is done first


def test_generation_steps_price_every_token():
    """One request, OSL 11: ten decode steps after its first token, each step_time long, KV transfer before them."""
    a = tr.Arrivals(np.array([0.0]), np.array([50]), np.array([11]), "one")
    r = simulate(a, Deployment("dwdp", 1, 1, 100, 1, 1, 4), lambda s, segs: 0.5, lambda tp, b, kv: 0.02,
                 lambda isl: 0.3)
    assert r.first_token_s[0] == pytest.approx(0.5)
    assert r.done_s[0] == pytest.approx(0.5 + 0.3 + 10 * 0.02)
    m = summarize(r, 2, Slo())
    assert m.tpot_s == pytest.approx((0.3 + 0.2) / 10)


def _r1_run(seed: int):
    m = PRESETS["deepseek-r1"]
    spec = pl.PlanSpec(model=m, gpu=get_gpu("h200"), target="trtllm")
    dc = decode_cost(m, "h200", "fp8")
    a = tr.generate(tr.Traffic(tr.LengthDist(8192, "uniform_ratio"), tr.LengthDist(64), rate=1.0, duration_s=60,
                               seed=seed))
    cost = ContextCost(spec, "dwdp", 8)
    d = Deployment("dwdp", 8, 8, 16384, 8, 1, 32)
    return simulate(a, d, lambda s, segs: cost.seconds(segs), lambda tp, b, kv: dc.step_ms(tp, b, kv) * 1e-3,
                    lambda isl: 0.01)


def test_same_seed_same_result_other_seed_other_result():
    a, b, c = _r1_run(3), _r1_run(3), _r1_run(4)
    for f in ("arrival_s", "first_token_s", "done_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.first_token_s, c.first_token_s) or a.arrival_s.size != c.arrival_s.size


def test_cached_iteration_price_matches_the_planner_uncached():
    """ContextCost caches on a rounded shape; the price stays within 1% of planner.iteration_times on the exact one."""
    m = PRESETS["deepseek-r1"]
    spec = pl.PlanSpec(model=m, gpu=get_gpu("h200"), target="trtllm")
    cost = ContextCost(spec, "dwdp", 8)
    for parts in ([(0, 7000, 7000), (0, 9000, 9000)], [(4096, 3000, 7096)], [(0, 8191, 8191), (0, 8193, 8193)]):
        warm = cost.seconds([Segments(tuple(parts))])  # fills the cache with this shape's bin
        tok = np.array([[sum(n for _, n, _ in parts)]], float)
        core = np.array([[sum(float(core_flops(m, n, p)) for p, n, _ in parts)]])
        kv = np.array([[sum(p + n for p, n, _ in parts)]], float)
        isl = sum(i * n for _, n, i in parts) / tok[0, 0]
        exact = pl.iteration_times(spec, IterationLoad(tok, kv, core, np.array([[len(parts)]], float)), 8, 0,
                                   2 << 20, isl).dwdp_SR[0, 0] * 1e-6
        assert warm == pytest.approx(exact, rel=0.01)


def test_trace_round_trip(tmp_path):
    a = tr.generate(tr.Traffic(tr.LengthDist(4000, "normal", cv=0.3), tr.LengthDist(500, "uniform_ratio"),
                               rate=3.0, duration_s=30, seed=5))
    p = tmp_path / "t.jsonl"
    tr.write_trace(a, p)
    b = tr.read_trace(p)
    assert np.array_equal(a.isl, b.isl) and np.array_equal(a.osl, b.osl)
    # timestamps are whole milliseconds in the format, relative to the first request
    assert np.allclose(b.t_s, np.round(a.t_s * 1000) / 1000 - np.round(a.t_s[0] * 1000) / 1000, atol=1e-9)


def test_trace_reads_the_mooncake_sample_lines(tmp_path):
    """The two sample lines of kvcache-ai/Mooncake FAST25-release/README.md @ 40ea55f8 (hash_ids ignored)."""
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}\n'
                 '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 2366]}\n')
    a = tr.read_trace(p)
    assert list(a.isl) == [6955, 6472] and list(a.osl) == [52, 26]
    assert list(a.t_s) == pytest.approx([0.0, 3.053])


@pytest.mark.parametrize("line, key", [('{"timestamp": 1, "input_length": 0, "output_length": 5}', "input_length"),
                                       ('{"timestamp": 1, "input_length": 10}', "output_length"),
                                       ('{"timestamp": "x", "input_length": 10, "output_length": 5}', "timestamp")])
def test_bad_trace_line_is_refused_naming_line_and_key(tmp_path, line, key):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 5}\n' + line + "\n")
    with pytest.raises(ConfigError) as e:
        tr.read_trace(p)
    assert e.value.file.endswith("bad.jsonl:2") and e.value.key == key


@pytest.mark.parametrize("kw, arg", [(dict(rate=0.0), "--rate"), (dict(rate=math.nan), "--rate"),
                                     (dict(concurrency=0), "--concurrency"), (dict(), "--rate"),
                                     (dict(rate=1.0, concurrency=2), "--rate"),
                                     (dict(rate=1.0, duration_s=0.5), "--duration"),
                                     (dict(rate=1.0, isl=tr.LengthDist(0)), "--isl"),
                                     (dict(rate=1.0, osl=tr.LengthDist(10, "weird")), "--osl-dist"),
                                     (dict(rate=1.0, isl=tr.LengthDist(10, "uniform_ratio", ratio=1.5)), "--isl-ratio")])
def test_bad_traffic_is_refused_naming_the_argument(kw, arg):
    base = dict(isl=tr.LengthDist(100), osl=tr.LengthDist(10))
    with pytest.raises(ConfigError) as e:
        tr.generate(tr.Traffic(**{**base, **kw}))
    assert e.value.key == arg


@pytest.mark.parametrize("slo, arg", [(Slo(ttft_p50_s=-1), "--ttft-p50"), (Slo(ttft_p99_s=math.inf), "--ttft-p99"),
                                      (Slo(tps_user=0), "--tps-user"), (Slo(ttft_p50_s=5, ttft_p99_s=2), "--ttft-p50")])
def test_bad_slo_is_refused_naming_the_argument(slo, arg):
    with pytest.raises(ConfigError) as e:
        slo.check()
    assert e.value.key == arg


def test_closed_loop_user_sends_the_next_request_when_the_last_finished():
    """One user, fixed service D, OSL 1: back-to-back requests, each TTFT = D, about duration / D of them."""
    a = tr.generate(tr.Traffic(tr.LengthDist(100), tr.LengthDist(1), concurrency=1, duration_s=10.0, seed=0))
    r = simulate(a, Deployment("dwdp", 1, 1, 100, 1, 1, 1), lambda s, segs: 0.25, lambda *_: 0.0, lambda isl: 0.0)
    assert np.allclose(r.first_token_s - r.arrival_s, 0.25)
    assert np.allclose(np.diff(r.arrival_s), 0.25)
    assert r.arrival_s.size == 41  # issued at 0, 0.25, ..., 10.0 (the last one at the horizon)


def test_decode_step_reads_the_tables_and_grows_with_batch_and_context():
    """A decode step is the per-layer sum of the shipped rows: more requests or a longer context never cost less,
    and one step at batch 1 is at least the MoE layers' MLA modules read straight from the generation table."""
    dc = decode_cost(PRESETS["deepseek-r1"], "h200", "fp8")
    m = dc.model
    rows = {(b, k): v for b, k, v in dc.gen["mla_generation_module"]["fp8_block/fp8"]["rows"]}
    assert dc.module_ms(64, 8192) == pytest.approx(rows[(64, 8192)])
    assert dc.step_ms(8, 1, 8192) >= (m.num_moe_layers + m.first_k_dense) * rows[(1, 8192)]
    steps = [dc.step_ms(8, b, 8192) for b in (1, 4, 16, 64, 256)]
    assert steps == sorted(steps)
    assert dc.step_ms(8, 32, 2048) < dc.step_ms(8, 32, 32768)


def test_decode_tables_refuse_a_model_without_generation_rows():
    with pytest.raises(ConfigError) as e:
        decode_cost(PRESETS["qwen3-30b-a3b"], "h200", "bf16")
    assert e.value.key == "--model" and "generation rows" in e.value.expected


@pytest.mark.parametrize("target", ["trtllm", "engine"])
def test_iteration_times_equal_predicts_whole_iteration_times(target):
    """planner.iteration_times (what the simulator prices an iteration with) composes the layers as predict does:
    on predict's own sampled load (fixed ISL, full MNT per rank) its DEP and DWDP times are predict's
    t_iteration_dep_us / t_iteration_dwdp_us."""
    spec = pl.PlanSpec(model=PRESETS["deepseek-r1"], gpu=get_gpu("h200"), target=target, mnt=16384)
    row = pl.predict(spec, 8, 0, 2 << 20, 8192)
    it = pl.iteration_times(spec, pl.sampled_load(spec, 8192, 8), 8, 0, 2 << 20, 8192)
    assert float(it.dep_S.mean()) == pytest.approx(row.t_iteration_dep_us, rel=1e-9)
    assert float(it.dwdp_SR.mean()) == pytest.approx(row.t_iteration_dwdp_us, rel=1e-9)
    lo = pl.iteration_times(spec, pl.sampled_load(spec, 8192, 8), 8, 0, 2 << 20, 8192, which="low")
    assert float(lo.dwdp_SR.mean()) > float(it.dwdp_SR.mean())  # DWDP's worse end is slower


def _rounds_result(users: int, rounds: int, extra: int, cycle: float, osl: int, steady_end: float):
    """A closed loop in lock-step rounds (by hand): `users` requests at k x cycle for k < rounds, then `extra` at
    rounds x cycle; first token 1 s after arrival, finish one cycle after it."""
    from dwdp_trtllm.sizing.simulator import SimResult
    arr = np.concatenate([np.full(users, k * cycle) for k in range(rounds)] + [np.full(extra, rounds * cycle)])
    n = arr.size
    return SimResult(arr, arr + 1.0, arr + cycle, np.full(n, 100), np.full(n, osl), float(arr.max() + cycle),
                     0.0, 0, 0.0, steady_end)


def test_closed_loop_output_rate_excludes_the_drain_after_the_last_send():
    """4 users, 10 full rounds of 10 s and 2 prompts in an 11th: the steady rate is users x OSL / cycle = 40.4
    tokens/s (20.2 per GPU on 2 GPUs). Counting to the last finish (the old window: 11 cycles, 2 users in the
    last) gives (9 x 4 + 2) x 101 / 100 s = 38.38 (19.19 per GPU), 5% under."""
    r = _rounds_result(4, 10, 2, 10.0, 101, steady_end=100.0)  # the last send: the 11th round at 100 s
    m = summarize(r, 2, Slo())
    assert m.tps_window == (10.0, 100.0)
    assert m.output_tps_per_gpu == pytest.approx(4 * 101 / 10.0 / 2, rel=1e-9)
    old = summarize(_rounds_result(4, 10, 2, 10.0, 101, steady_end=math.nan), 2, Slo())  # open-loop rule: window_s
    assert old.output_tps_per_gpu == pytest.approx((9 * 4 + 2) * 101 / 100.0 / 2, rel=1e-9)


def test_simulated_closed_loop_reports_its_last_send_as_the_steady_end():
    """Closed loop of 2 users, 5 prompts, context 0.25 s per iteration (OSL 1): sends at 0, 0 (together), 0.25,
    0.25, 0.5: the steady load ends at 0.5 s, the last request finishes at 0.75 s."""
    a = tr.generate(tr.Traffic(tr.LengthDist(100), tr.LengthDist(1), concurrency=2, duration_s=100.0, seed=0,
                               requests=5))
    r = simulate(a, Deployment("dwdp", 1, 1, 1000, 1, 1, 1), lambda s, segs: 0.25, lambda *_: 0.0, lambda isl: 0.0)
    assert r.steady_end_s == pytest.approx(0.5)
    assert r.window_s == pytest.approx(0.75)
    opened = tr.generate(tr.Traffic(tr.LengthDist(100), tr.LengthDist(1), rate=5.0, duration_s=10.0, seed=0))
    assert math.isnan(simulate(opened, Deployment("dwdp", 1, 1, 1000, 1, 1, 1), lambda s, segs: 0.01,
                               lambda *_: 0.0, lambda isl: 0.0).steady_end_s)  # open loop: its last arrival


def test_context_server_without_chunking_runs_whole_prompts_max_batch_at_a_time():
    """One DWDP rank, 6 requests of 300 tokens at 0, MNT 1000, iteration 1 s: chunked, 1000-token iterations cut
    prompts (first tokens at 1, 1, 1, 2, 2, 2: 900 + the 4th's first 100 tokens, then 1000 = 4th's last 200 +
    the rest); without chunking at max_batch 2: 2 whole prompts per iteration, first tokens at 1, 1, 2, 2, 3, 3."""
    a = tr.Arrivals(np.zeros(6), np.full(6, 300), np.ones(6, int), "six")
    one_s = lambda s, segs: 1.0  # noqa: E731
    r = simulate(a, Deployment("dwdp", 1, 1, 1000, 1, 1, 1), one_s, lambda *_: 0.0, lambda isl: 0.0)
    assert list(r.first_token_s) == [1, 1, 1, 2, 2, 2]
    d = Deployment("dwdp", 1, 1, 1000, 1, 1, 1, ctx_max_batch=2, chunked=False)
    r = simulate(a, d, one_s, lambda *_: 0.0, lambda isl: 0.0)
    assert list(r.first_token_s) == [1, 1, 2, 2, 3, 3]


def _gb200_spec():
    from dwdp_trtllm.perf.plan_spec import PlanSpec
    return PlanSpec(model=PRESETS["deepseek-r1"], gpu=get_gpu("gb200"), weight_dtype="nvfp4", target="trtllm",
                    dep_comm="alltoall", interference=1.19)


def test_mtp_over_the_prompt_is_priced_as_one_more_moe_layer():
    """MTP_EAGLE runs the checkpoint's MTP layer once over the prompt: the iteration costs what the planner prices
    for the model with one more MoE layer, i.e. base + one MoE layer = base x (1 + 1/58) of the MoE part."""
    from dataclasses import replace
    s = _gb200_spec()
    segs = [Segments(((0, 8192, 8192), (0, 8192, 8192)))]
    for mode, group, rk in (("dwdp", 4, 1), ("dep", 4, 4)):
        base = ContextCost(s, mode, group, slice_bytes=0).seconds(segs * rk)
        with_mtp = ContextCost(s, mode, group, slice_bytes=0, mtp_prompt=True).seconds(segs * rk)
        m = s.model
        s62 = replace(s, model=replace(m, num_layers=m.num_layers + 1))
        assert with_mtp == pytest.approx(ContextCost(s62, mode, group, slice_bytes=0).seconds(segs * rk), rel=1e-12)
        dense = ContextCost(replace(s, model=replace(m, num_layers=m.first_k_dense)), mode, group,
                            slice_bytes=0).seconds(segs * rk)  # the dense layers alone (no MoE layer)
        per_moe = (base - dense) / m.num_moe_layers
        assert with_mtp == pytest.approx(base + per_moe, rel=1e-6)


def test_kv_contention_adds_the_iterations_kv_bytes_to_the_rank_s_served_bytes():
    """DWDP4 rank at 2 x 8K tokens: its served expert bytes per MoE layer plus the iteration's KV bytes / 58 MoE
    layers (16384 tokens x 61 layers x 576 elements x 2 B / 58, the bf16 KV the KV transfer is priced at) set the
    pull; DEP is unchanged."""
    from dwdp_trtllm.perf import cost_model as cm
    s = _gb200_spec()
    m, p = s.model, s.params()
    placement = pl._placement(s, 4, 0)
    kv_per_layer = 16384 * 61 * 576 * 2 / 58
    dest, src = cm.fetch_bytes(m, placement, p.weight_dtype)
    plain, with_kv = cm.prefetch_us(m, p, placement, 0), cm.prefetch_us(m, p, placement, 0, kv_per_layer)
    assert with_kv / plain == pytest.approx(max(dest, src + kv_per_layer) / max(dest, src), rel=1e-12)
    assert with_kv > plain
    segs = [Segments(((0, 8192, 8192), (0, 8192, 8192)))]
    load, isl = ContextCost(s, "dwdp", 4)._load(segs)
    want = pl.iteration_times(s, load, 4, 0, 0, isl, extra_src_bytes=kv_per_layer).dwdp_SR[0, 0] * 1e-6
    assert ContextCost(s, "dwdp", 4, slice_bytes=0, kv_contention=True).seconds(segs) == pytest.approx(want, rel=1e-12)
    dep = [segs[0]] * 4
    assert ContextCost(s, "dep", 4, slice_bytes=0, kv_contention=True).seconds(dep) == \
        ContextCost(s, "dep", 4, slice_bytes=0).seconds(dep)


def test_round_robin_router_sends_requests_to_context_servers_in_turn():
    """Two one-rank DWDP servers, four requests at t = 0, 1, 2, 3 s (ISL 1000, 10, 10, 10; each iteration 0.01 s
    per token): the default router sends each to the server with the fewest outstanding tokens (server 0 holds the
    1000-token request until t = 10, so requests 1-3 all go to server 1); TensorRT-LLM's default disaggregated
    router (round robin, tensorrt_llm/serve/router.py @ 00895e31 create_router) alternates 0, 1, 0, 1 whatever the
    load, so request 2 waits behind request 0; an unknown router is refused."""
    a = tr.Arrivals(np.array([0.0, 1.0, 2.0, 3.0]), np.array([1000, 10, 10, 10]), np.array([1, 1, 1, 1]), "four")
    by_server = {}

    def ctx(s, segs):
        by_server.setdefault(s, []).append(segs[0].tokens)
        return 0.01 * segs[0].tokens
    d = Deployment("dwdp", 1, 2, 4096, 1, 1, 1)
    r = simulate(a, d, ctx, lambda *_: 0.0, lambda isl: 0.0)
    assert by_server == {0: [1000], 1: [10, 10, 10]}
    assert list(r.first_token_s) == pytest.approx([10.0, 1.1, 2.1, 3.1])
    by_server.clear()
    r = simulate(a, replace(d, ctx_router="round_robin"), ctx, lambda *_: 0.0, lambda isl: 0.0)
    assert by_server == {0: [1000, 10], 1: [10, 10]}
    assert list(r.first_token_s) == pytest.approx([10.0, 1.1, 10.1, 3.1])
    with pytest.raises(ValueError, match="ctx_router"):
        simulate(a, replace(d, ctx_router="random"), ctx, lambda *_: 0.0, lambda isl: 0.0)
