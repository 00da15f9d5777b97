"""Metric arithmetic on hand-made RankResults (expected values computed by hand in the comments)."""
import copy
import math

import pytest

from dwdp_trtllm.bench.metrics import compute_metrics, consistency, mode_metrics, ratios
from dwdp_trtllm.bench.timeline import steady_timeline
from dwdp_trtllm.engine.records import IterationRecord, RankResult, Request, Segment

T0 = 100.0


def it(rank, i, a, b, segs, warmup=False, phases=()):
    return IterationRecord(rank=rank, iteration=i, t_start=T0 + a, t_end=T0 + b,
                           num_tokens=sum(s.length for s in segs), segments=segs, warmup=warmup,
                           phases=[(p, l, T0 + s, T0 + e) for p, l, s, e in phases])


def two_ranks(device="cpu"):
    r0 = RankResult(
        rank=0, mode="dep", device=device, t0=T0,
        requests=[Request(0, 0, 100, 0.0), Request(1, 0, 50, 0.0)],
        iterations=[
            it(0, 0, 0.0, 0.5, [Segment(0, 0, 100, True)], warmup=True, phases=[("attention", 0, 0.0, 0.5)]),
            it(0, 1, 0.5, 1.0, [Segment(1, 0, 50, True)],
               phases=[("attention", 0, 0.5, 0.6), ("sync_wait", 0, 0.6, 0.65), ("attention", 1, 0.7, 0.8)]),
            it(0, 2, 1.0, 1.5, [], phases=[("sync_wait", -1, 1.0, 1.4)]),  # empty DEP iteration
        ],
        first_token_s={0: T0 + 0.5, 1: T0 + 1.0},
        memory_bytes={"weights": 10, "prefetch_slots": 2, "activations": 5, "peak_total": 17})
    r1 = RankResult(
        rank=1, mode="dep", device=device, t0=T0,
        requests=[Request(2, 1, 60, 0.0), Request(3, 1, 90, 0.2)],
        iterations=[
            it(1, 0, 0.0, 0.5, [Segment(2, 0, 60, True)], warmup=True),
            it(1, 1, 0.5, 1.0, [Segment(3, 0, 40, False)], phases=[("expert_gemm", 0, 0.6, 0.8)]),
            it(1, 2, 1.0, 1.5, [Segment(3, 40, 50, True)],
               phases=[("copy", 1, 1.0, 1.25), ("prefetch_wait", 1, 1.2, 1.25), ("expert_gemm", 1, 1.2, 1.5)]),
        ],
        first_token_s={2: T0 + 0.5, 3: T0 + 1.5},
        memory_bytes={"weights": 10, "prefetch_slots": 4, "activations": 3, "peak_total": 18}, copy_bytes=77)
    return [r0, r1]


def test_mode_metrics_by_hand():
    m = mode_metrics(two_ranks(), num_layers=2)
    # measured: r0 it1, it2; r1 it1, it2 -> tokens 50 + 0 + 40 + 50; window 100.5 .. 101.5
    assert m["tokens"] == 140 and m["total_tokens"] == 300 and m["iterations"] == 4 and m["busy_iterations"] == 3
    assert m["window_s"] == pytest.approx(1.0)
    assert m["tps_per_gpu"] == pytest.approx(140 / 1.0 / 2)
    assert m["iterations_per_s"] == pytest.approx(3 / 1.0 / 2)
    # busy spans: r0 50 tokens over [0.5, 1.0] = 100/s; r1 90 over [0.5, 1.5] = 90/s
    assert m["tps_per_gpu_busy"] == pytest.approx(95.0)
    # TTFT of requests with no warm-up chunk: id1 101.0 - 100.0 = 1.0 s; id3 101.5 - 100.2 = 1.3 s
    assert m["requests_measured"] == 2 and m["requests_unfinished"] == 0
    assert m["ttft_p50_ms"] == pytest.approx(1150.0)
    assert m["ttft_p90_ms"] == pytest.approx(1270.0)
    assert m["ttft_p99_ms"] == pytest.approx(1297.0)
    # per layer per iteration: sums / (4 iterations * 2 layers); the 0.5 s warm-up attention is excluded
    us = m["layer_us"]
    assert us["attention"] == pytest.approx(0.2 / 8 * 1e6)
    assert us["sync_wait"] == pytest.approx(0.45 / 8 * 1e6)
    assert us["expert_gemm"] == pytest.approx(0.5 / 8 * 1e6)
    assert us["copy"] == pytest.approx(0.25 / 8 * 1e6)
    assert us["prefetch_wait"] == pytest.approx(0.05 / 8 * 1e6) == us["exposed_copy"]
    assert us["hidden_copy"] == pytest.approx(0.20 / 8 * 1e6)
    assert us["other"] == 0 and us["all_to_all"] == 0
    assert m["memory_max_bytes"] == {"weights": 10, "prefetch_slots": 4, "activations": 5, "peak_total": 18}
    assert m["memory_bytes"]["1"]["prefetch_slots"] == 4
    assert m["copy_bytes"] == 77
    assert m["ranks_share_gpu"] is False and m["num_gpus"] == 2 and m["tps_per_device"] == m["tps_per_gpu"]


def test_shared_gpu_is_flagged_and_still_divides_by_ranks():
    m = mode_metrics(two_ranks(device="NVIDIA H200"), num_layers=2, num_gpus=1)
    assert m["ranks_share_gpu"] is True and m["devices"] == ["NVIDIA H200"] and m["num_gpus"] == 1
    assert m["tps_per_gpu"] == pytest.approx(70.0)
    assert m["tps_per_device"] == pytest.approx(140.0)
    with pytest.raises(ValueError, match="num_gpus"):
        mode_metrics(two_ranks(), 2, num_gpus=3)


def test_unfinished_request_and_hidden_copy_clip():
    res = two_ranks()
    del res[1].first_token_s[3]
    res[1].iterations[2].phases = [("copy", 1, T0 + 1.0, T0 + 1.01), ("prefetch_wait", 1, T0 + 1.0, T0 + 1.3)]
    m = mode_metrics(res, num_layers=2)
    assert m["requests_unfinished"] == 1 and m["requests_measured"] == 1
    assert m["ttft_p50_ms"] == pytest.approx(1000.0)
    assert m["layer_us"]["hidden_copy"] == 0.0  # copy 10 ms < exposed wait 300 ms: clipped at 0


def test_ratios_and_consistency():
    dep = two_ranks()
    dwdp = copy.deepcopy(dep)
    for r in dwdp:
        r.mode = "dwdp"
        for i in r.iterations:  # DWDP: every time after the start scaled by 0.8
            i.t_start, i.t_end = T0 + (i.t_start - T0) * 0.8, T0 + (i.t_end - T0) * 0.8
        r.first_token_s = {k: T0 + (v - T0) * 0.8 for k, v in r.first_token_s.items()}
    m = compute_metrics({"dep": dep, "dwdp": dwdp}, num_layers=2)
    assert m["ratio"]["tps_per_gpu"] == pytest.approx(1 / 0.8)
    assert m["ratio"]["tps_per_gpu"] == pytest.approx(m["dwdp"]["tps_per_gpu"] / m["dep"]["tps_per_gpu"])
    # TTFT: dwdp id1 0.8 s, id3 1.2 - 0.2 = 1.0 s -> p50 0.9 s; DEP p50 1.15 s
    assert m["ratio"]["ttft_speedup_p50"] == pytest.approx(1.15 / 0.9)
    c = consistency(m, expected_tokens=300)
    assert c["ok"] and c["tokens_equal_across_modes"] and c["tokens_match_workload"] and c["ratio_matches"]
    bad = copy.deepcopy(m)
    bad["ratio"]["tps_per_gpu"] *= 1.01
    assert not consistency(bad, 300)["ratio_matches"] and not consistency(bad, 300)["ok"]
    assert not consistency(m, 301)["tokens_match_workload"]
    dwdp[0].iterations[1].num_tokens += 1
    c = consistency(compute_metrics({"dep": dep, "dwdp": dwdp}, 2), 300)
    assert not c["tokens_equal_across_modes"] and not c["ok"]
    assert compute_metrics({"dep": dep}, 2)["ratio"] == {}
    assert math.isnan(ratios({**m["dep"], "tps_per_gpu": 0.0}, m["dwdp"])["tps_per_gpu"])


def test_steady_timeline_window_and_clipping():
    t = steady_timeline(two_ranks())
    # DEP (lock-step): rank 0's busy measured iterations with phases: [1] -> k = 1; window [100.5, 101.0]
    assert t["align"] == "wall_clock" and t["iteration"] == {"0": 1, "1": 1}
    assert t["duration_s"] == pytest.approx(0.5)
    r0 = {tuple(x[:2]): x[2:] for x in t["ranks"]["0"]}
    assert r0[("attention", 0)] == pytest.approx([0.0, 0.1])
    assert r0[("attention", 1)] == pytest.approx([0.2, 0.3])
    assert ("sync_wait", -1) in r0 and r0[("sync_wait", -1)] == pytest.approx([0.5, 0.5])  # touches the edge
    assert [x[0] for x in t["ranks"]["1"]][:1] == ["expert_gemm"]


def test_free_running_ranks_show_one_iteration_each_from_their_own_start():
    """DWDP ranks drift apart: a shared wall-clock window of iteration k would hold several iterations of one rank
    (the plot then contradicted the table's iteration time); each rank shows its own middle busy iteration."""
    ranks = []
    for rank, (start, dur) in enumerate([(0.0, 0.1), (0.35, 0.3)]):  # rank 1 starts late and runs slower
        its = [it(rank, i, start + i * dur, start + (i + 1) * dur, [Segment(10 * rank + i, 0, 10, True)],
                  warmup=i == 0, phases=[("attention", 0, start + i * dur, start + i * dur + dur / 2),
                                         ("copy", 1, start + i * dur - dur / 4, start + i * dur + dur / 4)])
               for i in range(4)]  # measured: 1, 2, 3 -> the middle one is 2
        ranks.append(RankResult(rank=rank, mode="dwdp", device="cpu", t0=T0, requests=[], iterations=its,
                                first_token_s={}, memory_bytes={}))
    t = steady_timeline(ranks)
    assert t["align"] == "per_rank" and t["iteration"] == {"0": 2, "1": 2}
    assert t["duration_s"] == pytest.approx(0.3)  # the longest single iteration, not 0.35 + 0.9 - 0.2
    assert t["iterations"] == {"0": [pytest.approx([0.0, 0.1])], "1": [pytest.approx([0.0, 0.3])]}
    r1 = [x for x in t["ranks"]["1"] if x[3] > x[2]]  # spans of the next iteration touch the end at 0.3
    assert r1 == [["attention", 0, pytest.approx(0.0), pytest.approx(0.15)],  # from rank 1's own start
                  ["copy", 1, pytest.approx(0.0), pytest.approx(0.075)],  # issued before the iteration, clipped
                  ["copy", 1, pytest.approx(0.225), pytest.approx(0.3)]]  # the next iteration's, clipped


def test_timeline_plot_one_iteration_per_mode_every_mark_in_the_legend_titled_by_its_point():
    from matplotlib.colors import to_rgba

    from dwdp_trtllm.bench.plots import COLORS, MIN_COPY_WIDTH, TIMELINE_LABELS, timeline_figure

    dep = steady_timeline(two_ranks())
    dwdp_ranks = two_ranks()
    for r in dwdp_ranks:
        r.mode = "dwdp"
    dwdp = steady_timeline(dwdp_ranks)
    run = {"config": {"model": {"preset": "tiny"}, "run": {"ranks": 2}, "workload": {"isl": 200}},
           "point": {"workload.isl": 200, "dwdp.dwdp_size": 2}, "env": {"device": "cpu"},
           "timeline": {"dep": dep, "dwdp": dwdp}}
    fig = timeline_figure(run)
    assert "point workload.isl=200, dwdp.dwdp_size=2" in fig._suptitle.get_text()
    ax_dep, ax_dwdp = fig.axes
    assert ax_dep.get_xlim() == ax_dwdp.get_xlim() == pytest.approx((0, 500.0))  # one axis: the longest window
    assert "iteration 1 of every rank on the shared clock" in ax_dep.get_title(loc="left")
    assert "one iteration per rank (rank 0: 1, rank 1: 2), each from its own start" in ax_dwdp.get_title(loc="left")
    legend = [x.get_text() for x in fig.legends[0].get_texts()]
    for label in TIMELINE_LABELS.values():
        assert any(x.startswith(label.rstrip(")")) for x in legend), (label, legend)
    assert "iteration start / end of that rank" in legend  # the grey marks
    assert any(f"drawn at least {MIN_COPY_WIDTH:.1%}" in x for x in legend)
    # rank 1's copy (0.25 s in its iteration of 0.5 s) on the lower lane of DWDP's panel, wide enough to see
    copy_rgba = to_rgba(COLORS["copy"])
    copies = [b for b in ax_dwdp.collections if len(b.get_facecolor()) and tuple(b.get_facecolor()[0]) == copy_rgba]
    widths = [p.get_extents().width for b in copies for p in b.get_paths()]
    assert len(widths) == 1 and widths[0] == pytest.approx(250.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="no rank results"):
        mode_metrics([], 2)
    with pytest.raises(ValueError, match="num_layers"):
        mode_metrics(two_ranks(), 0)


def test_allocator_counters_are_reported_and_flagged():
    import io
    from rich.console import Console
    from dwdp_trtllm.bench.report import print_point
    res = two_ranks(device="NVIDIA H200")
    res[0].extra["allocator_after_warmup"] = {"device_allocs": 0, "alloc_retries": 0, "ooms": 0}
    res[1].extra["allocator_after_warmup"] = {"device_allocs": 3, "alloc_retries": 2, "ooms": 0}
    m = mode_metrics(res, num_layers=2, num_gpus=1)
    assert m["allocator_after_warmup"]["1"] == {"device_allocs": 3, "alloc_retries": 2, "ooms": 0}
    assert mode_metrics(two_ranks(), num_layers=2)["allocator_after_warmup"] == {}  # CPU: none recorded
    dwdp = copy.deepcopy(res)
    for r in dwdp:
        r.mode = "dwdp"
    metrics = compute_metrics({"dep": res, "dwdp": dwdp}, 2, 1)
    out = io.StringIO()
    print_point(Console(file=out, width=200), {"config": {}, "point": {}, "metrics": metrics, "consistency": {}})
    text = out.getvalue()
    assert "dep: the caching allocator freed its cache and retried" in text and "rank(s) 1" in text


def test_layer_us_divides_moe_phases_by_moe_layers_and_iteration_ms_has_the_totals():
    # measured iterations: r0 it1 (attention 0.1 + 0.1, sync 0.05), r0 it2 (sync 0.4), r1 it1 (gemm 0.2),
    # r1 it2 (copy 0.25, wait 0.05, gemm 0.3): 4 iterations; 2 layers of which 1 is MoE
    m = mode_metrics(two_ranks(), num_layers=2, num_moe_layers=1)
    us, per_it = m["layer_us"], m["iteration_ms"]
    assert math.isclose(us["attention"], 0.2 / (4 * 2) * 1e6)  # per attention layer (both layers)
    assert math.isclose(us["expert_gemm"], 0.5 / (4 * 1) * 1e6)  # per MoE layer
    assert math.isclose(us["sync_wait"], 0.45 / 4 * 1e6)
    assert math.isclose(per_it["expert_gemm"], 0.5 / 4 * 1e3) and math.isclose(per_it["attention"], 0.2 / 4 * 1e3)
    assert math.isclose(per_it["wall"], 0.5 * 1e3)  # the three measured iterations with tokens, 0.5 s each


def test_iteration_ms_median_is_robust_to_one_slow_iteration():
    """The median over measured iterations with tokens (r0 it1, r1 it1, r1 it2): a one-time cost in one iteration
    moves the mean wall, not the median."""
    res = two_ranks()
    m = mode_metrics(res, num_layers=2, num_moe_layers=1)["iteration_ms_median"]
    assert math.isclose(m["expert_gemm"], 200.0) and math.isclose(m["attention"], 0.0)
    assert math.isclose(m["wall"], 500.0)
    res[1].iterations[2].t_end += 10.0  # r1 it2 took 10 s longer (say, a kernel compiled inside it)
    slow = mode_metrics(res, num_layers=2, num_moe_layers=1)
    assert slow["iteration_ms"]["wall"] > 3000 and math.isclose(slow["iteration_ms_median"]["wall"], 500.0)
