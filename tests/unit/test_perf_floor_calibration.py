"""Floor calibration from `dwdp bench --floor` runs: points, interpolation, the core fit, campaign selection,
repeatability and leave-one-out (synthetic runs whose work is rebuilt exactly, and the committed floors)."""
import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from dwdp_trtllm.commands.validate_plan import SUMMARY_PHASES, summary_rows, validate
from dwdp_trtllm.perf.bench_work import floor_flops, rebuild, run_model
from dwdp_trtllm.perf.floor_calibration import FloorCalibration, idw
from dwdp_trtllm.perf.floor_points import REPEAT_TOLERANCE, mark_unrepeatable, points_from_bench

#: the committed measurements of a source checkout (docs/bench_results)
CHECKOUT_BENCH_DIR = Path(__file__).resolve().parents[2] / "docs" / "bench_results"

RATES = {"attention_proj": 700.0, "attention_core": 400.0, "expert_gemm": 500.0, "other": 650.0}


def _run(isl=8192, mnt=16384, dtype="bf16", modes=("dep",), factor=None, date="2026-12-03T10:00:00+00:00",
         one_time_ms=None, **metrics_extra):
    """A one-rank floor run whose floor is exactly the rebuilt work at RATES; measured = floor x factor, per
    iteration; one_time_ms: {phase: ms} added to the first measured iteration only (mean and median written)."""
    factor = factor or {"attention": 1.5, "expert_gemm": 1.0, "other": 1.7}
    cfg = {"model": {"preset": "deepseek-r1", "num_layers": 3, "first_k_dense": 1, "dtype": "bf16"},
           "dwdp": {"dwdp_size": 1, "weight_dtype": dtype},
           "workload": {"isl": isl, "isl_dist": "uniform_ratio", "max_num_tokens": mnt, "tokens_per_rank": 5 * mnt},
           "run": {"device": "cuda", "ranks": 1, "warmup_iters": 1, "modes": list(modes)}}
    spec = run_model(cfg)
    load, _ = rebuild(cfg, spec)
    flops = floor_flops(spec, load)
    floor_ms = {k: flops[k] / RATES[k] * 1e-9 for k in RATES}
    floor_ms["attention"] = floor_ms["attention_proj"] + floor_ms["attention_core"]
    # per iteration: floor proportional to the iteration's FLOPs (a constant rate), measured = floor x factor
    per = [floor_flops(spec, load.at(s)) for s in range(load.tokens_SR.shape[0]) if load.tokens_SR[s].sum() > 0]
    its = []
    for i, fl in enumerate(per):
        ms = {k: fl[k] / RATES[k] * 1e-9 for k in RATES}
        d = {"attention": (ms["attention_proj"] + ms["attention_core"]) * factor["attention"],
             "expert_gemm": ms["expert_gemm"] * factor["expert_gemm"], "other": ms["other"] * factor["other"]}
        for k, v in (one_time_ms or {}).items():
            d[k] += v if i == 0 else 0.0
        d["wall"] = sum(d.values()) * 1.01
        its.append(d)
    it = {k: float(np.mean([d[k] for d in its])) for k in its[0]}
    med = {k: float(np.median([d[k] for d in its])) for k in its[0]}
    busy = len(per)
    m = {"tokens": float(load.tokens_SR.sum()), "iteration_ms": it, "num_gpus": 1, **metrics_extra}
    f = {"iterations": busy, "floor_ms": floor_ms, "floor_tflops": dict(RATES),
         "measured_ms": {**{k: it[k] for k in factor}, "total": it["wall"]}}  # over the same (busy) iterations
    if one_time_ms is not None:
        m["iteration_ms_median"] = med
        f["measured_over_floor_median"] = {k: v for k, v in factor.items()}
    return {"config": cfg, "env": {"device_name": "NVIDIA H200", "date": date},
            "metrics": {mode: m for mode in modes}, "floor": {mode: f for mode in modes}}


def _write(path, *runs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": list(runs)}))
    return path


def test_idw_is_exact_at_points_and_bounded():
    xy, v = [(1000, 2048), (16000, 8192), (32000, 32768)], [1.0, 2.0, 4.0]
    assert idw(xy, v, 16000, 8192) == pytest.approx(2.0)
    out = idw(xy, v, np.array([10.0, 5e5, 20000]), 4096)
    assert np.all((out >= 1.0) & (out <= 4.0))
    assert idw(xy, v, 16000) == pytest.approx(2.0)  # tokens only


def test_point_from_a_floor_run(tmp_path):
    p = _write(tmp_path / "c" / "r.json", _run(modes=("dep", "dwdp")))
    pts, notes = points_from_bench(json.loads(p.read_text()), file=str(p))
    assert not notes and [q.mode for q in pts] == ["dep", "dwdp"]
    q = pts[0]
    assert q.flops["expert_gemm"] / q.floor_ms["expert_gemm"] * 1e-9 == pytest.approx(RATES["expert_gemm"])
    assert q.factor("attention") == pytest.approx(1.5) and q.factor("outside") == pytest.approx(1.01)
    assert q.calls is not None and q.calls > 0  # rebuilt batches reproduce the floor's FLOPs
    assert q.expert_tokens == pytest.approx(q.tokens)  # one rank: every routed pair of its own tokens


def test_measured_means_are_over_the_floors_iterations(tmp_path):
    """The mean statistic is the floor's measured_ms (busy iterations, the floor's set), not metrics iteration_ms,
    whose phase means also count DEP's empty lock-step iterations: diluting those leaves the point unchanged."""
    r = _run()
    it = r["metrics"]["dep"]["iteration_ms"]
    it.update({k: v * 0.5 for k, v in it.items() if k != "wall"})  # as if half the measured iterations were empty
    q = points_from_bench({"runs": [r]}, file=str(tmp_path / "x.json"))[0][0]
    assert q.measured["mean"]["attention"] == pytest.approx(r["floor"]["dep"]["measured_ms"]["attention"])
    assert q.factor("attention") == pytest.approx(1.5) and q.factor("outside") == pytest.approx(1.01)


def test_shared_gpu_runs_do_not_calibrate_and_allocator_retries_exclude(tmp_path):
    """A run whose ranks shared a GPU is a point with every statistic marked (validate-plan annotates its errors)
    that calibrates nothing, floor rates included; allocator retries mark its phases."""
    from dwdp_trtllm.perf.floor_points import STATS, TIMED_PHASES

    shared = _run(ranks_share_gpu=True)
    retry = _run(allocator_after_warmup={"0": {"device_allocs": 3, "alloc_retries": 1, "ooms": 0}})
    pts, notes = points_from_bench({"runs": [shared, retry]}, file=str(tmp_path / "x.json"))
    assert len(pts) == 2 and any("time-slicing" in n for n in notes)
    s, r = pts
    assert s.shared_gpu and not r.shared_gpu
    assert {f"{st}.{ph}" for st in STATS for ph in (*TIMED_PHASES, "wall")} <= set(s.excluded)
    assert all(why.startswith("ranks shared a GPU") for why in s.excluded.values())
    assert all(s.factor(ph) is None for ph in ("attention", "expert_gemm", "other", "outside"))
    assert "allocator" in r.excluded["mean.attention"] and r.factor("attention") is None
    sel = FloorCalibration(tuple(pts)).select()
    assert sel.points == (r,)  # the allocator-marked point still gives floor rates, the shared one nothing


def test_core_fit_recovers_rate_and_per_call_cost(tmp_path):
    """floor core = FLOPs / R + calls x c: the fit recovers R and c from runs of different calls per FLOP."""
    R, c = 420.0, 0.25  # TFLOP/s, ms per call and layer
    pts = []
    for isl in (2048, 8192, 32768):
        r = _run(isl=isl, mnt=max(16384, isl))
        q = points_from_bench({"runs": [r]}, file=str(tmp_path / f"{isl}.json"))[0][0]
        r["floor"]["dep"]["floor_ms"]["attention_core"] = q.flops["attention_core"] * 1e-9 / R + q.calls * c
        r["floor"]["dep"]["floor_tflops"]["attention_core"] = q.flops["attention_core"] * 1e-9 / r["floor"]["dep"]["floor_ms"]["attention_core"]
        pts += points_from_bench({"runs": [r]}, file=str(tmp_path / f"{isl}.json"))[0]
    fit = FloorCalibration(tuple(pts)).core
    assert fit == pytest.approx((R, c), rel=1e-6)
    # one point (or proportional calls): the rate alone
    assert FloorCalibration(tuple(pts[:1])).core[1] == 0.0


def test_expert_fit_recovers_per_dtype_rates_and_the_shared_per_expert_cost(tmp_path):
    """floor experts = FLOPs / R_dtype x (1 + k a(m) / m): BF16 measured at one size only still gets FP8's size
    dependence through the shared k."""
    from dwdp_trtllm.perf.floor_calibration import expert_overhead

    R, k = {"bf16": 640.0, "fp8": 960.0}, 120.0
    pts = []
    for n, (dtype, isl, mnt) in enumerate((("bf16", 8192, 16384), ("fp8", 8192, 16384), ("fp8", 32768, 32768))):
        r = _run(isl=isl, mnt=mnt, dtype=dtype)
        q = points_from_bench({"runs": [r]}, file=str(tmp_path / f"{n}.json"))[0][0]
        ms = q.flops["expert_gemm"] * 1e-9 / R[dtype] * float(expert_overhead(q.rows_per_expert, k))
        r["floor"]["dep"]["floor_ms"]["expert_gemm"] = ms
        r["floor"]["dep"]["floor_tflops"]["expert_gemm"] = q.flops["expert_gemm"] * 1e-9 / ms
        pts += points_from_bench({"runs": [r]}, file=str(tmp_path / f"{n}.json"))[0]
    rates, fit_k = FloorCalibration(tuple(pts)).experts
    assert fit_k == pytest.approx(k, rel=0.01)
    assert rates["bf16"] == pytest.approx(R["bf16"], rel=0.01) and rates["fp8"] == pytest.approx(R["fp8"], rel=0.01)
    assert float(expert_overhead(0.0, k)) == pytest.approx(1 + k)  # no rows: bounded, not infinite


def test_unrepeatable_phase_is_excluded_everywhere(tmp_path):
    a = _run(factor={"attention": 1.5, "expert_gemm": 1.0, "other": 1.7})
    b = _run(factor={"attention": 1.5 * (1 + 3 * REPEAT_TOLERANCE), "expert_gemm": 1.0 * (1 + REPEAT_TOLERANCE / 2), "other": 1.7})
    c = _run(isl=32768, mnt=32768)
    pts = [points_from_bench({"runs": [r]}, file=str(tmp_path / f"{n}.json"))[0][0] for n, r in (("a", a), ("b", b), ("c", c))]
    marked, why = mark_unrepeatable(pts)
    assert all("not repeatable" in q.excluded["mean.attention"] for q in marked)  # the whole campaign's attention
    assert all("mean.wall" in q.excluded and "mean.expert_gemm" not in q.excluded for q in marked)
    assert len(why) == 2 and "a.json dep" in why[0] and "b.json dep" in why[0]


def test_one_slow_repeat_among_agreeing_ones_is_marked_alone(tmp_path):
    """Identical work measured 1.5, 1.52 and 1.9 x floor: the two that agree stay, the slow one (one-time costs only
    add time) is marked, with its wall."""
    runs = [_run(factor={"attention": a, "expert_gemm": 1.0, "other": 1.7}) for a in (1.5, 1.52, 1.9)]
    pts = [points_from_bench({"runs": [r]}, file=str(tmp_path / f"{n}.json"))[0][0] for n, r in enumerate(runs)]
    marked, why = mark_unrepeatable(pts)
    assert [("mean.attention" in q.excluded) for q in marked] == [False, False, True]
    assert "one-time costs" in marked[2].excluded["mean.attention"] and "mean.wall" in marked[2].excluded
    assert len(why) == 1 and why[0].startswith("2.json dep mean.attention")


def test_selection_one_campaign_own_or_newest_and_leave_one_out(tmp_path):
    old = _write(tmp_path / "engine_floor_old" / "b8.json", _run(date="2026-12-02T10:00:00+00:00"))
    new8 = _write(tmp_path / "engine_floor_new" / "b8.json", _run())
    new32 = _write(tmp_path / "engine_floor_new" / "b32.json", _run(isl=32768, mnt=32768))
    pts = []
    for p in (old, new8, new32):
        pts += points_from_bench(json.loads(p.read_text()), file=str(p))[0]
    all_ = FloorCalibration(tuple(pts))
    newest = all_.select()
    assert newest.campaign.endswith("engine_floor_new") and len(newest.points) == 2 and not newest.validated
    own = all_.select(old)  # the validated file's own campaign, without the file itself
    assert own.campaign.endswith("engine_floor_old") and own.points == () and len(own.validated) == 1
    loo = all_.select(new8)
    assert [q.source for q in loo.points] == [str(new32.resolve())] and loo.validated[0].source == str(new8.resolve())
    assert any(n.startswith("leave-one-out: b8.json") for n in loo.notes)
    assert any("not used: campaign" in n for n in loo.notes)


def _args(bench_results):
    return argparse.Namespace(gpu="h200", calibration=None, bench_results=str(bench_results), no_bench_results=False,
                              interference=None, a2a_dedup=False, samples=256, engine_efficiency=True)


def test_clean_campaign_of_the_committed_floors_validates_every_phase(tmp_path):
    """The committed floors with measured means that are repeatable (floor x a smooth efficiency per ISL and dtype):
    every phase, attention and the wall included, is predicted leave-one-out within 15%, also at the shortest ISL
    (extrapolated: the core's per-call cost carries it)."""
    camps = sorted(CHECKOUT_BENCH_DIR.glob("engine_floor_*"))
    assert camps
    camp = tmp_path / "engine_floor_clean"
    camp.mkdir()
    files = []
    for f in sorted(camps[0].glob("*.json")):
        data = json.loads(f.read_text())
        runs = [r for r in data.get("runs", []) if r.get("floor") and r["config"]["run"]["ranks"] == 1]
        if not runs:
            continue
        for r in runs:
            isl, dt = r["config"]["workload"]["isl"], r["config"]["dwdp"]["weight_dtype"]
            eff = {"attention": 1.2 + 0.05 * np.log2(32768 / isl), "expert_gemm": 0.95 if dt == "bf16" else 1.4, "other": 1.75}
            for mode, fl in r["floor"].items():
                if isinstance(fl, dict):
                    it = r["metrics"][mode]["iteration_ms"]
                    it.update({k: fl["floor_ms"][k] * v for k, v in eff.items()})
                    it["wall"] = sum(it[k] for k in eff) * 1.01
                    fl["measured_ms"].update({**{k: it[k] for k in eff}, "total": it["wall"]})  # one rank: the same
        files.append(_write(camp / f.name, *runs))
    for f in files:
        rows = summary_rows(validate(str(f), _args(tmp_path)))
        for row in rows:
            for ph in SUMMARY_PHASES:
                x = row[ph]
                assert x["excluded"] is None, x["excluded"]
                assert abs(x["rel_error"]) <= 0.15, (f.name, row["mode"], ph, x)


def test_a_mean_polluted_by_one_time_costs_is_marked_and_the_median_calibrates_and_validates(tmp_path):
    """With the bench's medians (iteration_ms_median, measured_over_floor_median): a one-time cost in one measured
    iteration lifts the mean above what the work explains, so the mean is marked, the median-based efficiency
    calibrates, and validate-plan predicts the median within 15%, leave-one-out."""
    camp = tmp_path / "engine_floor_x"
    eff = {"attention": 1.4, "expert_gemm": 1.0, "other": 1.7}
    _write(camp / "b2.json", _run(isl=2048, factor=eff, one_time_ms={}))
    _write(camp / "b32.json", _run(isl=32768, mnt=32768, factor=eff, one_time_ms={}))
    polluted = _write(camp / "b8.json", _run(factor=eff, one_time_ms={"attention": 400.0}))
    q = points_from_bench(json.loads(polluted.read_text()), file=str(polluted))[0][0]
    assert "one-time costs" in q.excluded["mean.attention"] and "mean.wall" in q.excluded
    assert "median.attention" not in q.excluded and q.factor("attention") == pytest.approx(1.4)
    res = validate(str(polluted), _args(tmp_path))
    rows = {r["stat"]: r for r in summary_rows(res)}
    assert rows["mean"]["attention"]["excluded"] and rows["mean"]["expert_gemm"]["excluded"] is None
    for ph in SUMMARY_PHASES:
        x = rows["median"][ph]
        assert x["excluded"] is None and abs(x["rel_error"]) <= 0.15, (ph, x)


def test_copies_of_the_validated_runs_do_not_calibrate(tmp_path):
    """Leave-one-out by run id (point hash and date): a copy of the validated file's run in another file of the
    campaign is left out with it; validate-plan reads the validated file once and passes its run ids."""
    camp = tmp_path / "engine_floor_x"
    run = {**_run(), "point_hash": "abc123"}
    validated = _write(camp / "a.json", run)
    _write(camp / "copy.json", run)
    _write(camp / "b32.json", _run(isl=32768, mnt=32768))
    cal = validate(str(validated), _args(tmp_path))["calibration"]
    assert cal["runs"] == ["b32.json dep"]
    assert sorted(cal["left_out"]) == ["a.json dep", "copy.json dep"]


def test_validate_plan_marks_every_metric_of_a_shared_gpu_run(tmp_path):
    camp = tmp_path / "engine_floor_x"
    shared = _write(camp / "smoke.json", _run(ranks_share_gpu=True))
    _write(camp / "b32.json", _run(isl=32768, mnt=32768))
    (run,) = validate(str(shared), _args(tmp_path))["runs"]
    dep = [c for c in run["comparisons"] if c["metric"].startswith("dep.")]
    assert dep and all((c["excluded"] or "").startswith("ranks shared a GPU") for c in dep), dep


def test_a_floor_campaign_is_recognised_by_its_content_not_by_recency(tmp_path, capsys):
    """An in-progress directory (one file, one dtype, e.g. fp8_linear_.../run2/f32o) newer than a complete campaign
    does not calibrate; the choice is one printed line and does not depend on the order the files are read in."""
    from dwdp_trtllm.cli import main

    old = "2026-12-02T10:00:00+00:00"
    for name, dt, isl, mnt in (("b8", "bf16", 8192, 16384), ("b32", "bf16", 32768, 32768),
                               ("f8", "fp8", 8192, 16384), ("f32", "fp8", 32768, 32768)):
        modes = ("dep", "dwdp") if name == "f32" else ("dep",)  # one run, two points: the choice counts runs
        _write(tmp_path / "engine_floor_a" / f"{name}.json", _run(isl=isl, mnt=mnt, dtype=dt, date=old, modes=modes))
    _write(tmp_path / "fp8_linear" / "run2" / "f32o" / "results.json", _run(isl=32768, mnt=32768, dtype="fp8"))
    _write(tmp_path / "engine_floor_b" / "b8.json", _run())  # newer, one dtype at one size
    pts = []
    for p in sorted(tmp_path.rglob("*.json")):
        pts += points_from_bench(json.loads(p.read_text()), file=str(p))[0]
    sel = FloorCalibration(tuple(pts)).select()
    assert sel.campaign.endswith("engine_floor_a") and len(sel.points) == 5
    assert sel.choice.startswith(f"floor campaign {sel.campaign} (the newest complete campaign; bf16 at 2 sizes; "
                                 "fp8 at 2 sizes): 4 run(s) calibrate (5 point(s): run x mode); 2 other campaign(s) not used, "
                                 "2 of them incomplete")
    assert FloorCalibration(tuple(reversed(pts))).select().choice == sel.choice  # deterministic
    assert any("fp8_linear/run2/f32o (one campaign calibrates; fp8 at 1 size" in n for n in sel.notes)
    # no complete campaign: the most complete, said so
    part = FloorCalibration(tuple(p for p in pts if "engine_floor_a" not in p.campaign)).select()
    assert part.choice.startswith("floor campaign ") and "(no complete campaign: the most complete;" in part.choice
    # dwdp plan --target engine prints the choice, relative to the data's root, on one line
    assert main(["plan", "--target", "engine", "--bench-results", str(tmp_path), "--isl", "8192", "--dwdp-size", "8",
                 "--gpu", "h200"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "floor campaign" in ln]
    assert len(lines) == 1 and lines[0].startswith("floor campaign engine_floor_a (the newest complete campaign")
