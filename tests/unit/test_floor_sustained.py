"""The floor under sustained load (bench/floor_sustained.py, `dwdp bench --floor --floor-sustained`) and the GPU
clock samples beside it (bench/gpu_clocks.py): when the warm-up ends and how many replays are timed, that the replay
runs the burst floor's kernels in the engine's layer order, the report's fields and lines, the flags' refusals
(exit 2 naming the flag, before any rank starts), and the NVML sampler against a fake pynvml. CPU times here are
functional checks, not performance results."""
from __future__ import annotations

import sys
import time
import types

import pytest
import torch
import yaml

from dwdp_trtllm import cli
from dwdp_trtllm.bench import floor as floor_mod
from dwdp_trtllm.bench.floor import Batch, FloorTimer, floor_report, over_floor
from dwdp_trtllm.bench.floor_sustained import (MAX_WARMUP_FACTOR, SustainedSettings, iteration_pieces,
                                               measured_window, summary, sustained_floor, tail_steady,
                                               timed_passes, warmup_done)
from dwdp_trtllm.bench.gpu_clocks import GpuSampler, clock_stats, clock_text, parse_smi
from dwdp_trtllm.bench.report import floor_clock_lines, floor_table, sustained_table
from dwdp_trtllm.engine.records import IterationRecord, RankResult, Segment
from dwdp_trtllm.spec.models import get_model


# ---- when the warm-up ends, how many passes are timed ---------------------------------------------------------
def test_tail_steady_needs_two_windows_that_agree():
    assert not tail_steady([10, 10, 10, 10, 10], 3, 0.02)  # fewer than 2 x window passes
    assert tail_steady([10, 10, 10, 10.1, 10.1, 10.1], 3, 0.02)
    # the clock falling under load: the pass time still growing by 5% a window is not steady
    assert not tail_steady([10, 10, 10, 10.5, 10.5, 10.5], 3, 0.02)
    assert tail_steady([9, 12, 10, 10, 30, 10, 10.1], 3, 0.02)  # medians: one outlier per window does not move them


def test_warmup_ends_when_steady_after_warmup_s_or_at_the_cap():
    st = SustainedSettings(warmup_s=2.0, window=2, rel_tol=0.01)
    flat, rising = [5.0] * 6, [5.0, 5.2, 5.4, 5.6, 5.8, 6.0]
    assert warmup_done(1.9, flat, st) is None  # steady, but warmup_s has not gone by
    assert warmup_done(2.0, flat, st) == "steady"
    assert warmup_done(3.0, rising, st) is None
    assert warmup_done(MAX_WARMUP_FACTOR * 2.0, rising, st) == "cap"


def test_timed_passes_cover_the_engines_span_within_bounds():
    st = SustainedSettings(min_timed=5, max_timed=60)
    assert timed_passes(100.0, 2.0, st) == 20  # 2 s of engine iterations at 100 ms a pass
    assert timed_passes(100.0, 2.05, st) == 21  # rounded up: at least as long as the engine ran
    assert timed_passes(100.0, 0.1, st) == 5
    assert timed_passes(10.0, 60.0, st) == 60
    assert timed_passes(100.0, None, st) == 5


def _it(t0, t1, warmup=False, tokens=8):
    return IterationRecord(rank=0, iteration=0, t_start=t0, t_end=t1, num_tokens=tokens, segments=[], warmup=warmup)


def test_measured_window_spans_the_measured_iterations_of_every_rank():
    r0 = RankResult(0, "dep", "cpu", 0.0, [], [_it(1.0, 2.0, warmup=True), _it(2.0, 3.0), _it(3.0, 4.0, tokens=0)], {}, {})
    r1 = RankResult(1, "dep", "cpu", 0.0, [], [_it(2.5, 3.5)], {}, {})
    assert measured_window([r0, r1]) == (2.0, 3.5)  # warm-up and empty iterations left out
    assert measured_window([RankResult(0, "dep", "cpu", 0.0, [], [_it(1.0, 2.0, warmup=True)], {}, {})]) is None


# ---- the replay: the burst floor's kernels in the engine's layer order -----------------------------------------
def _batch(spec):
    return Batch(((0, 64), (32, 64)), tuple((4,) * spec.num_experts for _ in range(spec.num_moe_layers)))


def test_replay_runs_every_kernel_of_the_burst_floor_layer_by_layer():
    spec = get_model("tiny")  # 4 layers, 1 dense
    t = FloorTimer(spec, torch.float32, "float32", torch.device("cpu"), warmup=1, reps=1)
    b = _batch(spec)
    pieces = iteration_pieces(t, b)
    assert [ph for ph, _ in pieces] == ["attention", "other"] + ["attention", "other", "expert_gemm"] * 3
    n_attn = len(t.attention_proj_gemms(b.tokens, 160)) + 2  # projections + passes + core
    assert [len(f) for ph, f in pieces if ph == "attention"] == [n_attn] * spec.num_layers
    assert [len(f) for ph, f in pieces if ph == "other"] == ([len(t.dense_mlp_gemms(b.tokens))]
                                                              + [len(t.moe_other_gemms(b.tokens))] * 3)
    # the attention core replayed is the way the burst floor timed fastest, and timing the burst first is not needed
    assert t.attention_core_fn(b.segments) is not None and b.segments in t._core_pick


def test_sustained_floor_times_enough_passes_and_reports_per_phase(monkeypatch):
    spec = get_model("tiny")
    t = FloorTimer(spec, torch.float32, "float32", torch.device("cpu"), warmup=1, reps=1)
    b = _batch(spec)
    st = SustainedSettings(warmup_s=0.05, min_timed=3, max_timed=7)
    res = sustained_floor(t, [b, b], 10.0, st)  # a 10 s engine span: capped at max_timed
    assert res["passes_timed"] == 7 == len(res["pass_ms"])
    assert res["warmup_end"] in ("steady", "cap") and res["warmup_s"] >= 0.05 and res["warmup_passes"] >= 1
    f = res["floor_ms"]
    assert all(f[k] > 0 for k in ("attention", "expert_gemm", "other", "total"))
    # per pass: two iterations of the batch; the floor is per iteration. Each iteration's time is at most its
    # pass's, so (order statistics) its median is at most the passes' median, whatever the machine's load
    assert f["total"] <= sorted(res["pass_ms"])[3]
    t0, t1 = res["window"]
    assert t0 < t1 <= time.perf_counter()


def test_sustained_floor_is_the_mean_over_iterations_of_the_median_over_passes(monkeypatch):
    """The arithmetic on scripted pass times (no clock): per phase and in total, the median over the timed passes of
    each iteration, then the mean over iterations; every timed pass's ms reported."""
    import dwdp_trtllm.bench.floor_sustained as fs
    spec = get_model("tiny")
    t = FloorTimer(spec, torch.float32, "float32", torch.device("cpu"), warmup=1, reps=1)
    b = _batch(spec)
    # warm-up: one pass (warmup_s=0 ends it at the cap); then 3 timed passes (min_timed=max_timed=3)
    scripted = [[{"attention": 1.0, "expert_gemm": 1.0, "other": 1.0}] * 2] + [
        [{"attention": 2.0, "expert_gemm": 10.0, "other": 1.0}, {"attention": 4.0, "expert_gemm": 20.0, "other": 1.0}],
        [{"attention": 3.0, "expert_gemm": 30.0, "other": 1.0}, {"attention": 6.0, "expert_gemm": 0.0, "other": 1.0}],
        [{"attention": 1.0, "expert_gemm": 20.0, "other": 9.0}, {"attention": 5.0, "expert_gemm": 40.0, "other": 1.0}]]
    it = iter(scripted)
    monkeypatch.setattr(fs, "_run_pass", lambda iters, cuda: next(it))
    res = sustained_floor(t, [b, b], None, SustainedSettings(warmup_s=0.0, window=2, min_timed=3, max_timed=3))
    assert res["warmup_passes"] == 1 and res["warmup_end"] == "cap" and res["passes_timed"] == 3
    assert res["pass_ms"] == [38.0, 41.0, 76.0]
    f = res["floor_ms"]
    assert f["attention"] == pytest.approx((2.0 + 5.0) / 2) and f["expert_gemm"] == pytest.approx((20.0 + 20.0) / 2)
    assert f["other"] == pytest.approx(1.0)
    # the total is the median of each iteration's own totals (13, 34, 30 -> 30; 25, 7, 46 -> 25), not the sum of
    # the phases' medians (23 and 26)
    assert f["total"] == pytest.approx((30.0 + 25.0) / 2)


# ---- floor_report: the sustained entry, the ratio, the clocks ---------------------------------------------------
class _Cfg:
    def __init__(self, spec):
        self.model = types.SimpleNamespace(spec=lambda: spec, dtype="float32", fp8_linear=None)
        self.run = types.SimpleNamespace(device="cpu")
        self.dwdp = types.SimpleNamespace(weight_dtype="float32")


def _by_mode(spec):
    segs = [Segment(0, 0, 64, True), Segment(1, 32, 64, True)]
    counts = [[4] * spec.num_experts for _ in range(spec.num_moe_layers)]
    its = [IterationRecord(0, i, 1.0 + i, 1.05 + i, 128, segs, False,
                           phases=[("attention", -1, 1.0 + i, 1.02 + i), ("expert_gemm", -1, 1.02 + i, 1.03 + i),
                                   ("other", -1, 1.03 + i, 1.04 + i)], expert_counts=counts) for i in range(2)]
    return {"dep": [RankResult(0, "dep", "cpu", 0.0, [], its, {}, {})]}


class _FakeSampler:
    def __init__(self, mhz):
        self.mhz = mhz

    def __enter__(self):
        self.entered = time.perf_counter()
        return self

    def __exit__(self, *exc):
        return False

    def stats(self, t0=None, t1=None, windows=None):
        self.windows = windows
        return {**clock_stats([(self.mhz, 500.0)]), "source": "fake"}


def test_floor_report_gives_the_sustained_floor_its_ratio_and_the_clocks(monkeypatch):
    spec = get_model("tiny")
    monkeypatch.setattr(floor_mod.FloorTimer, "release", lambda self: None)
    plain = floor_report(_Cfg(spec), _by_mode(spec))
    assert "sustained" not in plain["dep"] and "clock" not in plain["dep"]  # CPU, no --floor-sustained: as before
    mhz = iter([1980.0, 1550.0])
    made = []
    monkeypatch.setattr(floor_mod, "_sampler", lambda device: made.append(_FakeSampler(next(mhz))) or made[-1])
    engine = {**clock_stats([(1500.0, 690.0)]), "source": "fake"}
    rep = floor_report(_Cfg(spec), _by_mode(spec), sustained=SustainedSettings(warmup_s=0.02, min_timed=3),
                       engine_clocks={"dep": engine}, engine_windows={"dep": (1.0, 2.05)})
    d = rep["dep"]
    su = d["sustained"]
    assert su["engine_span_s"] == pytest.approx(1.05) and su["passes_timed"] >= 3
    for k in ("attention", "expert_gemm", "other", "total"):
        assert su["measured_over_floor"][k] == pytest.approx(d["measured_ms"][k] / su["floor_ms"][k])
    assert d["measured_over_floor"] == over_floor(d["measured_ms"], d["floor_ms"])  # one function for both ratios
    assert d["clock"]["floor_burst"]["sm_clock_mhz"]["median"] == 1980.0
    assert d["clock"]["floor_sustained"]["sm_clock_mhz"]["median"] == 1550.0
    assert d["clock"]["engine"] is engine
    # the burst floor's clock is cut to its timed calls: the windows FloorTimer.time_ms recorded, one per timing
    burst_windows = made[0].windows
    assert burst_windows and all(a < b for a, b in burst_windows)
    assert made[1].windows is None  # the sustained floor's: its own (t0, t1) of the timed passes
    # a second mode on the same shapes: its burst floor is memoised (timed in the first mode's block), so no timed
    # window of its own; the first mode's windows are not counted again
    by2 = _by_mode(spec)
    by2["dwdp"] = [RankResult(0, "dwdp", "cpu", 0.0, [], by2["dep"][0].iterations, {}, {})]
    made.clear()
    mhz = iter([1980.0, 1980.0])
    floor_report(_Cfg(spec), by2)
    assert made[0].windows and all(a >= made[0].entered for a, _ in made[0].windows)
    assert made[1].windows == []
    # the summary gpu_check.sh's floorsust prints reads these fields, computes nothing
    sm = summary({"floor": rep, "point": {"isl": 8192}})
    assert sm["engine_over_floor_sustained"] == su["measured_over_floor"]["total"]
    assert sm["engine_over_floor_burst"] == d["measured_over_floor"]["total"]
    assert (sm["floor_burst_sm_clock_mhz"], sm["floor_sustained_sm_clock_mhz"], sm["engine_sm_clock_mhz"]) == (1980, 1550, 1500)
    assert (sm["engine_ms"], sm["floor_sustained_ms"]) == (d["measured_ms"]["total"], su["floor_ms"]["total"])
    assert sm["engine_power_w"] == 690.0 and sm["point"] == {"isl": 8192} and sm["isl"] is None
    # a point set with --set (gpu_check floorsust) has no swept values: its ISL comes from the run's config
    assert summary({"floor": rep, "point": {}, "config": {"workload": {"isl": 2048}}})["isl"] == 2048


def test_over_floor_names_no_ratio_without_a_floor():
    assert over_floor({"attention": 2.0, "total": 3.0}, {"attention": 1.0, "total": 0.0}, ("attention", "total")) == \
        {"attention": 2.0, "total": None}


def test_the_table_and_the_clock_lines_show_both_floors_and_the_three_clocks():
    from rich.console import Console

    ms = {"attention": 50.0, "expert_gemm": 22.0, "other": 16.0, "total": 89.0}
    fl = {"attention": 43.5, "expert_gemm": 26.0, "other": 11.3, "total": 80.8}
    sfl = {"attention": 47.0, "expert_gemm": 27.0, "other": 12.5, "total": 86.5}
    clock = {"floor_burst": {**clock_stats([(1980, 124)]), "source": "nvml"},
             "floor_sustained": {**clock_stats([(1600, 690), (1560, 700)]), "source": "nvml"},
             "engine": {**clock_stats([(1552, 417)]), "source": "nvml"}}
    run = {"floor": {"device": "NVIDIA H200", "dep": {
        "floor_ms": fl, "measured_ms": ms, "measured_over_floor": over_floor(ms, fl),
        "measured_over_floor_median": over_floor(ms, fl),
        "sustained": {"floor_ms": sfl, "measured_over_floor": over_floor(ms, sfl)}, "clock": clock}}}
    run["floor"]["dep"]["sustained"].update(passes_timed=6, warmup_s=3.2, warmup_end="steady")
    con = Console(width=80, record=True)  # fits a terminal of 80 columns
    con.print(sustained_table(run, "dep"))
    text = con.export_text()
    assert "floor burst" in text and "x sustained" in text and "6 passes" in text

    def row(label):
        return next(ln for ln in text.splitlines() if ln.lstrip("│ ").startswith(label)).replace("│", " ").split()
    assert row("iteration")[1:] == ["80.8", "86.5", "89.0", f"{89.0 / 80.8:.2f}", f"{89.0 / 86.5:.2f}"]
    assert row("SM clock")[3:] == ["1,980", "1,580", "1,552"] and row("power")[2:] == ["124", "695", "417"]
    assert sustained_table({"floor": {"dep": {k: v for k, v in run["floor"]["dep"].items() if k != "sustained"}}},
                           "dep") is None
    con.print(floor_table(run))  # the burst table as before, no sustained columns
    assert "sustained" not in con.export_text()
    lines = floor_clock_lines(run)
    assert lines == [f"DEP GPU during the floor (burst): {clock_text(clock['floor_burst'])}",
                     f"DEP GPU during the floor (sustained): {clock_text(clock['floor_sustained'])}",
                     f"DEP GPU during the engine: {clock_text(clock['engine'])}"]
    assert "SM clock median 1580 MHz (1560-1600), power median 695 W (max 700 W), 2 samples (nvml)" in lines[1]


# ---- the flags --------------------------------------------------------------------------------------------------
CFG = {"model": {"preset": "tiny", "dtype": "float32"}, "dwdp": {"dwdp_size": 1, "weight_dtype": "float32"},
       "workload": {"isl": 64, "requests_per_rank": 2, "max_num_tokens": 128},
       "run": {"device": "cuda", "ranks": 1, "modes": ["dep"]}}


@pytest.mark.parametrize("argv, flag", [
    (["--floor-sustained"], "--floor-sustained"),  # without --floor
    (["--floor", "--floor-warmup-s", "2"], "--floor-warmup-s"),  # without --floor-sustained
    (["--floor", "--floor-sustained", "--floor-warmup-s", "abc"], "--floor-warmup-s"),
    (["--floor", "--floor-sustained", "--floor-warmup-s", "0.1"], "--floor-warmup-s"),
    (["--floor", "--floor-sustained", "--floor-warmup-s", "nan"], "--floor-warmup-s"),
    (["--floor", "--floor-sustained", "--floor-warmup-s", "61"], "--floor-warmup-s"),
])
def test_bad_sustained_flags_exit_2_naming_the_flag_before_anything_runs(tmp_path, capsys, monkeypatch, argv, flag):
    from dwdp_trtllm.bench import runner

    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    monkeypatch.setattr(runner, "load_sweep", lambda *a, **kw: pytest.fail("the config was loaded"))
    code = cli.main(["bench", str(cfg), "--out", str(tmp_path / "o"), *argv])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "o").exists()


def test_sustained_floor_refuses_more_ranks_than_it_replays_on_one_gpu(tmp_path, capsys, monkeypatch):
    """Every rank's iterations are replayed back to back on cuda:0: above MAX_RANKS ranks --floor-sustained is
    refused (exit 2, one line naming the flag and the limit) before any rank starts; --floor alone is not."""
    from dwdp_trtllm.bench import floor_sustained, runner
    from dwdp_trtllm.spec.schema import ConfigError

    pts = lambda *ranks: [types.SimpleNamespace(config=types.SimpleNamespace(run=types.SimpleNamespace(ranks=r)))  # noqa: E731
                          for r in ranks]
    floor_sustained.check_ranks(pts(1, floor_sustained.MAX_RANKS))
    with pytest.raises(ConfigError, match="--floor-sustained.*at most 2 ranks.*got 4, 8"):
        floor_sustained.check_ranks(pts(1, 8, 4))
    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump({**CFG, "run": {**CFG["run"], "ranks": 4}}))
    monkeypatch.setattr(runner, "check_device_present", lambda *a, **kw: pytest.fail("got past the checks"))
    code = cli.main(["bench", str(cfg), "--out", str(tmp_path / "o"), "--floor", "--floor-sustained"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "--floor-sustained" in err[0] and "at most 2 ranks" in err[0], err
    assert not (tmp_path / "o").exists()
    with pytest.raises(BaseException, match="got past the checks"):  # --floor alone: no rank limit
        cli.main(["bench", str(cfg), "--out", str(tmp_path / "o"), "--floor"])


def test_good_sustained_flags_reach_the_run(tmp_path, monkeypatch):
    from dwdp_trtllm.bench import runner

    seen = {}
    monkeypatch.setattr(runner, "run_bench", lambda *a, **kw: seen.update(kw) or {"consistent": True})
    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    assert cli.main(["bench", str(cfg), "--floor", "--floor-sustained", "--floor-warmup-s", "1.5"]) == 0
    assert seen["floor_sustained"] == SustainedSettings(warmup_s=1.5) and seen["floor"]
    assert cli.main(["bench", str(cfg), "--floor"]) == 0 and seen["floor_sustained"] is None


# ---- the sampler ------------------------------------------------------------------------------------------------
def test_clock_stats_and_text():
    st = clock_stats([(0.0, 1980, 120.0), (0.1, 1500, 700.0), (0.2, 1552, 417.0)])
    assert st == {"sm_clock_mhz": {"median": 1552.0, "min": 1500.0, "max": 1980.0},
                  "power_w": {"median": 417.0, "max": 700.0}, "samples": 3}
    assert clock_stats([]) == {"samples": 0}
    assert clock_text({"samples": 0, "source": "pynvml not importable"}) == "no clock samples (pynvml not importable)"


def test_parse_smi_maps_wall_stamps_onto_perf_counter():
    import datetime
    epoch = (datetime.datetime(2026, 12, 3, 23, 0, 0), 100.0)
    text = "2026/12/03 23:00:00.500, 1980, 124.50\n2026/12/03 23:00:01.000, [N/A], 100\n2026/12/03 23:00:02.250, 1552, 417"
    assert parse_smi(text, epoch) == [(100.5, 1980.0, 124.5), (102.25, 1552.0, 417.0)]


def test_nvml_sampler_reads_the_gpu_cuda_index_names(monkeypatch):
    """cuda:0 under CUDA_VISIBLE_DEVICES=2 is NVML's GPU 2: its clock is the one sampled, stamped on perf_counter."""
    class NVMLError(Exception):
        pass
    handles = ["h0", "h1", "h2"]
    inits = []  # +1 per nvmlInit, -1 per nvmlShutdown: NVML counts them, every init needs its shutdown
    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, nvmlInit=lambda: inits.append(1), nvmlDeviceGetCount=lambda: 3,
        nvmlDeviceGetHandleByIndex=lambda i: handles[i], nvmlDeviceGetUUID=lambda h: f"GPU-{h}".encode(),
        nvmlDeviceGetClockInfo=lambda h, kind: {"h0": 100, "h1": 200, "h2": 1552}[h] if kind == 1 else 0,
        nvmlDeviceGetPowerUsage=lambda h: 417_000, nvmlShutdown=lambda: inits.append(-1))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    t0 = time.perf_counter()
    with GpuSampler(0, period_s=0.005) as s:
        end = time.monotonic() + 60  # two samples taken, however slowly the thread runs (a sleep of 0.05 s was not
        while len(s.samples) < 2 and time.monotonic() < end:  # enough on a loaded machine)
            time.sleep(0.005)
    t1 = time.perf_counter()
    assert s.source == "nvml" and len(s.samples) >= 2
    assert {(mhz, w) for _, mhz, w in s.samples} == {(1552.0, 417.0)}
    assert all(t0 <= t <= t1 for t, _, _ in s.samples)
    assert s.window(t1, None) == [] and s.stats()["sm_clock_mhz"]["median"] == 1552.0
    assert inits == [1, -1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,1")  # cannot be told: no samples, said why
    with GpuSampler(0) as s2:
        pass
    assert s2.samples == [] and ("cuda:0" in s2.source or s2.source == "nvidia-smi")
    assert sum(inits) == 0  # NVML shut down again although no GPU was sampled


@pytest.mark.slow  # the real engine, the burst floor and the sustained floor: ~20 s on 2 cores
@pytest.mark.timeout(900)
def test_bench_floor_sustained_on_the_real_engine(tmp_path, capsys):
    """run_bench's plumbing (the CLI refuses --floor on a CPU; run_bench still runs it for this check): every mode
    gets its sustained floor and ratio in results.json, and the table shows both floors."""
    from pathlib import Path

    from dwdp_trtllm.bench.runner import run_bench

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "bench"
    st = SustainedSettings(warmup_s=0.05, min_timed=2, max_timed=3)
    assert run_bench(root / "configs/bench/ci_smoke.yaml", out_dir=out, floor=True, floor_sustained=st, plots=False,
                     console=None)["consistent"]
    import json
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    for mode in ("dep", "dwdp"):
        f = run["floor"][mode]
        su = f["sustained"]
        assert 2 <= su["passes_timed"] <= 3 and su["engine_span_s"] > 0
        for k in ("attention", "expert_gemm", "other", "total"):
            assert su["floor_ms"][k] > 0
            assert su["measured_over_floor"][k] == pytest.approx(f["measured_ms"][k] / su["floor_ms"][k])
        assert "clock" not in f  # a CPU run samples no GPU
    assert "engine vs the floor burst and sustained" in capsys.readouterr().out.replace("\n", " ")


def test_smi_sampler_keeps_only_samples_inside_the_block(monkeypatch):
    """Without NVML the sampler reads nvidia-smi, whose own stamps can fall before the block (its start) or after
    it (its last line): stats() with no window counts only those inside, as the NVML thread's are."""
    import datetime
    import shutil
    import subprocess

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError: the nvidia-smi path
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name if name == "nvidia-smi" else None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: types.SimpleNamespace(stdout="GPU-a\n"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    class Proc:
        def send_signal(self, sig):
            pass

        def communicate(self, timeout=None):
            now = datetime.datetime.now()
            line = lambda dt, mhz: f"{(now + datetime.timedelta(seconds=dt)).strftime('%Y/%m/%d %H:%M:%S.%f')}, {mhz}, 300"  # noqa: E731
            # before the block (nvidia-smi starting on an idle GPU), inside it, after it
            return "\n".join([line(-30.0, 345), line(-0.1, 1980), line(-0.05, 1970), line(+30.0, 1755)]), ""
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: Proc())
    with GpuSampler(0) as s:
        time.sleep(0.3)
    assert s.source == "nvidia-smi"
    assert [mhz for _, mhz, _ in s.samples] == [1980.0, 1970.0]
    assert s.stats()["samples"] == 2 and s.stats()["sm_clock_mhz"]["min"] == 1970.0


def test_burst_clock_counts_only_samples_inside_the_timed_calls(monkeypatch):
    """A fake sampler timeline (1 sample per fake second, perf_counter faked): the timed calls of time_ms run at
    1500 MHz, their warm-up and the host work between timings (buffer fills, gaps) at 1980 MHz. The stats cut to
    FloorTimer.windows see only the 1500 MHz samples and say how many fell inside; the whole block's do not."""
    now = [0.0]
    from dwdp_trtllm.bench import floor_timer
    monkeypatch.setattr(floor_timer.time, "perf_counter", lambda: now[0])
    timer = FloorTimer(get_model("tiny"), torch.float32, "float32", torch.device("cpu"), warmup=2, reps=3)
    timeline = []  # (t, MHz, W) as a sampler would have stamped it

    def host(seconds):
        for _ in range(seconds):
            timeline.append((now[0] + 0.5, 1980.0, 300.0))
            now[0] += 1.0
    timed_calls = []

    def kernel():  # 4 fake seconds of work; a warm-up call looks the same to the GPU, only time_ms knows
        for _ in range(4):
            timeline.append((now[0] + 0.5, 1500.0 if timer_state["timed"] else 1980.0, 650.0))
            now[0] += 1.0
        timed_calls.append(timer_state["timed"])
    timer_state = {"timed": False}
    real_time_ms = FloorTimer.time_ms

    def time_ms(self, fn):
        calls = []

        def counted():
            calls.append(1)
            timer_state["timed"] = len(calls) > self.warmup
            fn()
        return real_time_ms(self, counted)
    monkeypatch.setattr(FloorTimer, "time_ms", time_ms)
    host(10)  # before the first timing: buffer fills
    timer.time_ms(kernel)
    host(7)   # between timings: host work
    timer.time_ms(kernel)
    host(5)
    assert len(timer.windows) == 2 and timed_calls.count(True) == 6
    s = GpuSampler(0)
    s.samples, s.source = list(timeline), "fake"
    burst = s.stats(windows=timer.windows)
    assert burst["sm_clock_mhz"] == {"median": 1500.0, "min": 1500.0, "max": 1500.0}
    assert burst["samples"] == 24 and burst["samples_in_block"] == len(timeline) and burst["windows"] == 2
    assert s.stats()["sm_clock_mhz"]["max"] == 1980.0  # the whole block mixes in the host work
    assert "24 samples inside 2 timed windows (of 62 in the block)" in clock_text(burst)
