"""Pinned values of perf/recommend.py, the DWDP / DEP / marginal verdict `dwdp plan` reads from a range: each row's
verdict at its boundaries, the ISL sets the reason names, which setup is chosen (fitting ISLs, then nominal gains,
then the low end, then the smaller group and fewer redundant experts), plain data parallel's 2% tie, the reasons and
notes word for word, and the memory advice where nothing fits. The rows are written here by hand (the numbers a
planner would give), so every expected string and mean is a hand computation, not the planner's."""
from __future__ import annotations

import dataclasses
import importlib
import math
from types import SimpleNamespace

import pytest

from dwdp_trtllm.cli import build_parser
from dwdp_trtllm.commands.plan import build_spec
from dwdp_trtllm.deploy.memory import rank_memory
from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.spec.config import DwdpConfig

rc = importlib.import_module("dwdp_trtllm.perf.recommend")  # the package exports recommend(), the function
MiB = 2 ** 20
ISLS = (1024, 4096, 16384)
UNCAL = "slice size 2 MiB is not calibrated: `dwdp calibrate` measures it (slice_efficiency)"
SETUP = "G=8, redundant_experts=0, slice 2 MiB"


def _spec(gpu="h200", isls=ISLS, mnt=None, **kw):
    s = build_spec(build_parser().parse_args(["plan", "--model", "deepseek-r1", "--gpu", gpu, "--dwdp-size", "8",
                                              "--isl", ",".join(map(str, isls))]))
    return dataclasses.replace(s, isls=tuple(isls), mnt=mnt, **kw)


def _row(isl, lo, hi, s=None, *, g=8, red=0, sl=2 * MiB, fits=True, dep_fits=True, verdict=None, dep_on="",
         hidden=True, mem=140.0, mem_dep=90.0, parts=None, small=8, small_dep=8, tps=1000.0, extrap=None, local=32):
    """A plan row; its verdict by the rule the docs state (low end above 1: DWDP; high end below 1: DEP)."""
    if verdict is None:
        verdict = ("DEP" if dep_fits else "nothing fits") if not fits else (
            "DWDP" if not dep_fits or lo > 1 else "DEP" if hi < 1 else "marginal")
    return SimpleNamespace(isl=isl, dwdp_size=g, redundant_experts=red, slice_bytes=sl, fits=fits, dep_fits=dep_fits,
                           speedup=s if s is not None else math.sqrt(lo * hi), speedup_low=lo, speedup_high=hi,
                           verdict=verdict, depends_on=dep_on, prefetch_hidden=hidden, memory_per_rank_gb=mem,
                           memory_dep_gb=mem_dep, memory_parts_gb=parts or {"routed experts held": mem},
                           smallest_fitting_dwdp_size=small, smallest_fitting_dep_size=small_dep,
                           tps_per_gpu_dwdp=tps, extrapolated=extrap, local_experts=local)


# ---- one row -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi, fits, dep_fits, want", [
    (1.01, 2.0, True, True, "DWDP"), (1.0, 2.0, True, True, "marginal"), (0.5, 0.99, True, True, "DEP"),
    (0.5, 1.0, True, True, "marginal"), (0.9, 1.1, True, True, "marginal"),
    (0.5, 0.6, True, False, "DWDP"), (1.5, 2.0, False, True, "DEP"), (1.5, 2.0, False, False, "nothing fits"),
])
def test_row_verdict_from_the_range_unless_memory_decides(lo, hi, fits, dep_fits, want):
    assert rc.row_verdict(lo, hi, fits, dep_fits) == want


@pytest.mark.parametrize("isls, every, want", [
    ([4096], ISLS, "ISL 4096"), ([4096, 4096], ISLS, "ISL 4096"), ([16384, 1024, 4096], ISLS, "ISL 1024-16384"),
    ([1024, 4096], ISLS, "ISL <= 4096"), ([16384, 4096], ISLS, "ISL >= 4096"),
    ([2048, 4096], (1024, 2048, 4096, 8192), "ISL 2048-4096"), ([1024, 8192], (1024, 2048, 4096, 8192), "ISL 1024, 8192"),
    ([2048, 8192], (1024, 2048, 4096, 8192), "ISL 2048, 8192"), ([512, 1024], ISLS, "ISL 512, 1024"),
    ([1, 2], (3, 4), "ISL 1-2"),
])
def test_isl_set_names_runs_and_ends(isls, every, want):
    assert rc.isl_set(isls, every) == want


def test_fmt_slice():
    assert (rc.fmt_slice(0), rc.fmt_slice(2 * MiB), rc.fmt_slice(MiB // 2)) == ("unsliced", "2 MiB", "0.5 MiB")


def test_extrapolation_clause_names_each_phases_farthest_reach_farthest_first():
    rows = [_row(1024, 1, 1, extrap={"a": "2.0x the last row"}), _row(4096, 1, 1, extrap=None),
            _row(16384, 1, 1, extrap={"a": "4.0x the last row", "b": "1.5x the last row", "c": "8.25x the last row"})]
    assert rc.extrapolation_clause(rows) == (
        "; range widened 5% per doubling for cells past the kernel tables: c 8.2x the last row, a 4.0x the last row, "
        "b 1.5x the last row")
    assert rc.extrapolation_clause([_row(1024, 1, 1, extrap={})]) == ""
    assert rc.extrapolation_clause([_row(1024, 1, 1, extrap={"a": "0.5x the last row"})]).endswith("a 0.5x the last row")


# ---- the recommendation: DWDP --------------------------------------------------------------------------------------
def test_dwdp_where_the_whole_range_is_above_one_and_the_rest_named():
    rows = [_row(1024, 0.8, 1.2, 0.95, dep_on="interference"), _row(4096, 1.1, 1.3, 1.2),
            _row(16384, 1.2, 1.5, 1.35)]
    r = rc.recommend(_spec(), rows)
    assert (r.verdict, r.use_dwdp, r.dwdp_size, r.redundant_experts, r.slice_bytes) == ("DWDP", True, 8, 0, 2 * MiB)
    assert r.reason == (f"DWDP with {SETUP} at ISL 4096, 16384: 1.10-1.30x, 1.20-1.50x DWDP/DEP throughput, the "
                        "whole range above 1")
    assert r.notes == ("elsewhere: ISL 1024 marginal (0.80-1.20x); use DEP where DWDP is not certain to win", UNCAL)
    assert r.mean_speedup == pytest.approx((0.95 * 1.2 * 1.35) ** (1 / 3), rel=1e-12)
    assert r.speedup_range == pytest.approx(((0.8 * 1.1 * 1.2) ** (1 / 3), (1.2 * 1.3 * 1.5) ** (1 / 3)), rel=1e-12)
    assert r.depends_on == "interference" and r.by_isl == ((1024, "marginal"), (4096, "DWDP"), (16384, "DWDP"))
    assert r.to_dict() == {"verdict": "DWDP", "by_isl": {"1024": "marginal", "4096": "DWDP", "16384": "DWDP"},
                           "use_dwdp": True, "dwdp_size": 8, "redundant_experts": 0, "slice_bytes": 2 * MiB,
                           "mean_speedup": round((0.95 * 1.2 * 1.35) ** (1 / 3), 4),
                           "speedup_range": [round((0.8 * 1.1 * 1.2) ** (1 / 3), 4),
                                             round((1.2 * 1.3 * 1.5) ** (1 / 3), 4)],
                           "depends_on": "interference", "reason": r.reason, "notes": list(r.notes)}


def test_dwdp_everywhere_has_no_elsewhere_note_and_depends_on_the_rows_most_common_input():
    rows = [_row(1024, 1.1, 1.3, dep_on="routing"), _row(4096, 1.1, 1.3, dep_on="interference"),
            _row(16384, 1.1, 1.3, dep_on="interference")]
    r = rc.recommend(_spec(), rows)
    assert r.verdict == "DWDP" and r.notes == (UNCAL,) and r.depends_on == "interference"


def test_a_win_because_dep_does_not_fit_says_memory_chose():
    rows = [_row(1024, 1.1, 1.3), _row(4096, 0.7, 0.9, dep_fits=False)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert r.reason == (f"DWDP with {SETUP} at ISL 1024, 4096: 1.10-1.30x, 0.70-0.90x (DEP does not fit) DWDP/DEP "
                        "throughput; where DEP does not fit at this size the choice is memory's, not speed's")


def test_elsewhere_names_the_missing_peer_measurement_where_a_row_is_marginal():
    """mi355x: the published peer copies pulled from 3 peers, a DWDP8 rank pulls from 7 (uncertainty.peer_evidence)."""
    rows = [_row(1024, 0.8, 1.2), _row(4096, 1.1, 1.3), _row(16384, 0.5, 0.7)]
    r = rc.recommend(_spec("mi355x"), rows)
    assert r.notes[0] == (
        "elsewhere: ISL 1024 marginal (0.80-1.20x), ISL 16384 DEP (0.50-0.70x); use DEP where DWDP is not certain to "
        "win (marginal: no measurement of peer copies from 7 peers at once on mi355x (the published one pulled from "
        "3: sgl-project/sglang#33310 ROCM_BACKEND_RESULTS.md: SDMA copy from 3 peers at once; `dwdp calibrate` "
        "measures them))")
    rows = [_row(1024, 0.5, 0.7), _row(4096, 1.1, 1.3)]  # no marginal row: no measurement clause
    r = rc.recommend(_spec("mi355x", isls=(1024, 4096)), rows)
    assert r.notes[0] == "elsewhere: ISL 1024 DEP (0.50-0.70x); use DEP where DWDP is not certain to win"


# ---- DEP and marginal ----------------------------------------------------------------------------------------------
def test_dep_everywhere_names_the_exposed_prefetch():
    rows = [_row(1024, 0.7, 0.9, 0.8), _row(4096, 0.6, 0.95, 0.75, hidden=False)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    lo, hi, s = math.sqrt(0.7 * 0.6), math.sqrt(0.9 * 0.95), math.sqrt(0.8 * 0.75)
    assert (r.verdict, r.use_dwdp) == ("DEP", False)
    assert r.reason == (f"DEP: the best DWDP setup ({SETUP}) reaches {lo:.2f}-{hi:.2f}x (nominal {s:.2f}x; geometric "
                        "means over ISL 1024, 4096) DWDP/DEP throughput; prefetch exposed at ISL 4096")
    assert r.depends_on == ""
    rows = [_row(1024, 0.7, 0.9, 0.8), _row(4096, 0.6, 0.95, 0.75)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert r.reason.endswith("DWDP/DEP throughput; the all-to-all and sync DWDP removes cost less than the "
                             "interference it adds")


def test_marginal_everywhere_names_what_to_measure():
    rows = [_row(1024, 0.8, 1.2, 1.0, dep_on="interference"), _row(4096, 0.9, 1.4, 1.1, dep_on="interference")]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    lo, hi, s = math.sqrt(0.8 * 0.9), math.sqrt(1.2 * 1.4), math.sqrt(1.1)
    assert (r.verdict, r.use_dwdp, r.depends_on) == ("marginal", False, "interference")
    assert r.reason == ("marginal: depends on interference - `dwdp calibrate` measures it (copies beside attention and "
                        f"GEMMs, 2+ GPUs); DWDP with {SETUP} predicts {lo:.2f}-{hi:.2f}x (nominal {s:.2f}x; "
                        "geometric means over ISL 1024, 4096) DWDP/DEP throughput")
    rows = [_row(1024, 0.8, 1.2, dep_on="something new")]
    r = rc.recommend(_spec(isls=(1024,)), rows)
    assert r.reason.startswith("marginal: depends on something new - a multi-GPU run measures it; ")
    r = rc.recommend(_spec("mi355x", isls=(1024,)), rows)
    assert r.reason.startswith("marginal: no measurement of peer copies from 7 peers at once on mi355x (")


def test_dep_at_some_isls_and_marginal_at_the_others_in_one_line():
    rows = [_row(1024, 0.5, 0.7, dep_on="routing"), _row(4096, 0.8, 1.2, dep_on="interference"),
            _row(16384, 0.9, 1.3, dep_on="interference")]
    r = rc.recommend(_spec(), rows)
    assert (r.verdict, r.depends_on) == ("marginal", "interference")
    assert r.reason == ("DEP at ISL 1024 (0.50-0.70x: the whole range below 1); marginal at ISL >= 4096 with "
                        f"{SETUP} (0.80-1.20x, 0.90-1.30x; depends on interference - `dwdp calibrate` measures it "
                        "(copies beside attention and GEMMs, 2+ GPUs))")


def test_the_low_and_high_ends_fall_back_to_the_nominal_where_a_row_has_no_range():
    rows = [_row(1024, 0.0, 0.0, 0.9), _row(4096, 0.0, 0.0, 0.8)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert r.speedup_range == pytest.approx((math.sqrt(0.72), math.sqrt(0.72)), rel=1e-12)


def test_extrapolated_cells_and_a_misfit_isl_are_appended_to_the_reason():
    rows = [_row(1024, 1.1, 1.3, extrap={"routed experts (DEP, EP8)": "2.0x the last row"}),
            _row(4096, 1.1, 1.3, fits=False, mem=150.0, mem_dep=100.0)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert r.reason == (f"DWDP with {SETUP} at ISL 1024: 1.10-1.30x DWDP/DEP throughput, the whole range above 1"
                        "; range widened 5% per doubling for cells past the kernel tables: routed experts (DEP, EP8) "
                        "2.0x the last row; DWDP8 does not fit at ISL 4096 (150.0 GB per rank > 141.0 GB): DEP8 "
                        "there (100.0 GB)")
    assert r.by_isl == ((1024, "DWDP"), (4096, "DEP")) and r.mean_speedup == pytest.approx(math.sqrt(1.1 * 1.3))
    assert r.notes == (UNCAL,)  # DWDP everywhere it fits: no "elsewhere"


# ---- choosing the setup --------------------------------------------------------------------------------------------
def test_the_setup_fitting_most_isls_wins_over_a_faster_one():
    fast = [_row(1024, 2.0, 3.0, g=4, mem=100.0), _row(4096, 2.0, 3.0, g=4, fits=False, mem=150.0)]
    wide = [_row(1024, 1.1, 1.3), _row(4096, 1.1, 1.3)]
    assert rc.recommend(_spec(isls=(1024, 4096)), fast + wide).dwdp_size == 8


def test_then_the_nominal_gain_counting_losses_as_one():
    """G=4: speedups 1.5 and 0.5 -> max(., 1): sqrt(1.5 * 1) = 1.22; G=8: 1.2 and 1.2 -> 1.2: G=4 is chosen
    (the plain geometric mean, sqrt(0.75) = 0.87, would choose G=8)."""
    g4 = [_row(1024, 1.4, 1.6, 1.5, g=4), _row(4096, 0.4, 0.6, 0.5, g=4)]
    g8 = [_row(1024, 1.1, 1.3, 1.2), _row(4096, 1.1, 1.3, 1.2)]
    r = rc.recommend(_spec(isls=(1024, 4096)), g8 + g4)
    assert r.dwdp_size == 4 and r.mean_speedup == pytest.approx(math.sqrt(1.5 * 0.5))


def test_then_the_low_end_then_the_smaller_group_then_fewer_redundant_experts():
    a = [_row(1024, 1.05, 1.5, 1.2, g=8)]
    b = [_row(1024, 1.10, 1.4, 1.2, g=16)]
    assert rc.recommend(_spec(isls=(1024,)), a + b).dwdp_size == 16  # same nominal: the higher low end
    c = [_row(1024, 1.1, 1.4, 1.2, g=16)]
    d = [_row(1024, 1.1, 1.4, 1.2, g=8)]
    assert rc.recommend(_spec(isls=(1024,)), c + d).dwdp_size == 8  # all equal: the smaller group
    e = [_row(1024, 1.1, 1.4, 1.2, red=8)]
    f = [_row(1024, 1.1, 1.4, 1.2, red=0)]
    assert rc.recommend(_spec(isls=(1024,)), e + f).redundant_experts == 0
    # a setup scored on a row without a range uses its nominal as its low end
    g = [_row(1024, 0.0, 0.0, 1.2, g=8)]
    h = [_row(1024, 1.1, 1.4, 1.2, g=16)]
    assert rc.recommend(_spec(isls=(1024,)), g + h).dwdp_size == 8  # low end 1.2 > 1.1


# ---- plain data parallel -------------------------------------------------------------------------------------------
def _dp_rows(tps_dp, fits_dp=(True, True)):
    dp = [_row(i, 1.0, 1.0, 1.0, g=1, sl=0, mem=60.0, tps=tps_dp, fits=f) for i, f in zip((1024, 4096), fits_dp)]
    return dp + [_row(1024, 1.1, 1.3, tps=1000.0), _row(4096, 1.1, 1.3, tps=1000.0)]


def test_plain_dp_wins_within_two_percent_of_the_best_dwdp():
    r = rc.recommend(_spec(isls=(1024, 4096)), _dp_rows(980.0))
    assert (r.use_dwdp, r.dwdp_size, r.redundant_experts, r.slice_bytes, r.mean_speedup) == (False, 1, 0, 0, 1.0)
    assert (r.verdict, r.speedup_range, r.by_isl) == ("DP", (1.0, 1.0), ((1024, "DP"), (4096, "DP")))
    assert r.reason == ("plain data parallel (G=1): every expert fits on every rank (60.0 GB per rank <= 141.0 GB): "
                        "nothing to fetch, no all-to-all; 0.98x DWDP8's throughput per GPU (ties within 2% go to G=1)")


def test_plain_dp_loses_past_two_percent_or_where_it_does_not_fit_every_isl():
    assert rc.recommend(_spec(isls=(1024, 4096)), _dp_rows(979.0)).verdict == "DWDP"
    assert rc.recommend(_spec(isls=(1024, 4096)), _dp_rows(2000.0, (True, False))).verdict == "DWDP"


def test_plain_dp_where_no_dwdp_setup_fits():
    rows = [_row(1024, 1.0, 1.0, g=1, sl=0, mem=60.0), _row(1024, 1.1, 1.3, fits=False, mem=150.0)]
    r = rc.recommend(_spec(isls=(1024,)), rows)
    assert r.verdict == "DP" and r.reason == ("plain data parallel (G=1): every expert fits on every rank (60.0 GB per "
                                              "rank <= 141.0 GB): nothing to fetch, no all-to-all")


# ---- nothing of DWDP fits ------------------------------------------------------------------------------------------
def test_no_group_above_one_says_use_dep():
    r = rc.recommend(_spec(isls=(1024,)), [_row(1024, 1.0, 1.0, g=1, fits=False)])
    assert (r.verdict, r.use_dwdp, r.dwdp_size, r.reason) == (
        "DEP", False, None, "use DEP here: no DWDP group size > 1 among the candidates")


def test_dwdp_does_not_fit_dep_does_names_the_smallest_fitting_group():
    parts = {"routed experts held": 120.0, "prefetch slots": 25.0, "dense": 0.0}
    rows = [_row(1024, 1.1, 1.3, fits=False, mem=145.0, parts=parts, small=16),
            _row(4096, 1.1, 1.3, fits=False, mem=150.0, mem_dep=95.0, small=16),
            _row(1024, 1.1, 1.3, g=4, fits=False, mem=200.0, mem_dep=120.0)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert (r.verdict, r.use_dwdp, r.by_isl) == ("DEP", False, ((1024, "DEP"), (4096, "DEP")))
    assert r.reason == ("use DEP here: memory does not fit: DWDP8 does not fit at ISL 1024-4096 (145.0-150.0 GB per "
                        "rank > 141.0 GB): DEP8 there (95.0 GB); the smallest dwdp_size that fits every ISL is 16 "
                        "(DWDP8 at ISL 1024: routed experts held 120.0 GB, prefetch slots 25.0 GB)")
    rows = [_row(1024, 1.1, 1.3, fits=False, mem=145.0, small=8, parts=parts)]
    assert rc.recommend(_spec(isls=(1024,)), rows).reason.endswith(
        "; DWDP8 without redundant experts fits (DWDP8 at ISL 1024: routed experts held 120.0 GB, prefetch slots "
        "25.0 GB)")
    rows = [_row(1024, 1.1, 1.3, fits=False, mem=145.0, small=None, parts=parts)]
    assert "; no dwdp_size up to 64 fits (DWDP8 at ISL 1024:" in rc.recommend(_spec(isls=(1024,)), rows).reason
    rows = [_row(1024, 1.1, 1.3, fits=False, mem=145.0, small=4, parts=parts)]
    assert "; DWDP8 without redundant experts fits (" in rc.recommend(_spec(isls=(1024,)), rows).reason


def test_at_an_mnt_the_misfit_is_said_once_for_every_isl():
    rows = [_row(1024, 1.1, 1.3, fits=False, mem=145.0, small=16), _row(4096, 1.1, 1.3, fits=False, mem=145.0,
                                                                         small=16)]
    r = rc.recommend(_spec(isls=(1024, 4096), mnt=16384), rows)
    assert r.reason.startswith("use DEP here: memory does not fit: DWDP8 does not fit at MNT 16384 (145.0 GB per rank "
                               "> 141.0 GB): DEP8 there (90.0 GB); the smallest dwdp_size")


def test_nothing_fits_names_both_modes_and_the_smallest_counts():
    rows = [_row(1024, 1.1, 1.3, fits=False, dep_fits=False, mem=150.0, mem_dep=145.0, small=16, small_dep=16),
            _row(4096, 1.1, 1.3, fits=False, dep_fits=False, mem=160.0, mem_dep=150.0, small=32, small_dep=16)]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert (r.verdict, r.by_isl) == ("nothing fits", ((1024, "nothing fits"), (4096, "nothing fits")))
    assert r.reason == ("nothing fits 8 GPUs at ISL 1024-4096: DWDP8 needs 150.0-160.0 GB per rank (routed experts "
                        "held 150.0 GB at ISL 1024), DEP8 145.0-150.0 GB, budget 141.0 GB; smallest GPU count that "
                        "fits: DWDP 16 GPUs at ISL 1024, 32 GPUs at ISL 4096, DEP 16 GPUs")
    r = rc.recommend(_spec(isls=(1024, 4096), mnt=16384), rows)
    assert r.reason.startswith("nothing fits 8 GPUs at MNT 16384: DWDP8 needs 150.0 GB per rank (routed experts held "
                               "150.0 GB at ISL 1024), DEP8 145.0 GB, budget")
    r = rc.recommend(_spec(isls=(1024,)), rows[:1])
    assert "DWDP8 needs 150.0 GB per rank" in r.reason and ", DEP8 145.0 GB, budget" in r.reason


def test_a_misfit_where_dep_fits_at_some_isls_and_nothing_at_others():
    rows = [_row(1024, 1.1, 1.3), _row(4096, 1.1, 1.3, fits=False, mem=150.0, mem_dep=100.0),
            _row(16384, 1.1, 1.3, fits=False, dep_fits=False, mem=170.0, mem_dep=160.0, small=32, small_dep=16)]
    r = rc.recommend(_spec(), rows)
    assert r.reason.endswith(
        "; DWDP8 does not fit at ISL >= 4096 (150.0-170.0 GB per rank > 141.0 GB): DEP8 at ISL 4096; nothing fits 8 "
        "GPUs at ISL 16384 (DEP8 160.0 GB); smallest GPU count that fits: DWDP 32 GPUs, DEP 16 GPUs")


def test_counts_per_isl_only_where_they_differ():
    lo = _row(1024, 1, 1, small=16, small_dep=8)
    hi = _row(4096, 1, 1, small=16, small_dep=None)
    assert rc._counts(lo, hi) == ("smallest GPU count that fits: DWDP 16 GPUs, DEP 8 GPUs at ISL 1024, none up to 64 "
                                  "GPUs at ISL 4096")


# ---- notes ---------------------------------------------------------------------------------------------------------
def _rank_bytes(spec, r):
    cfg = DwdpConfig(dwdp_size=8, redundant_experts=r, source_policy=spec.source_policy)
    return rank_memory(spec.model, "dwdp", weight_dtype=spec.weight_dtype, max_num_tokens=0, dwdp=cfg).total


def test_more_redundant_experts_is_what_memory_prices_at_the_boundary():
    spec = _spec()
    grow3 = _rank_bytes(spec, 5) - _rank_bytes(spec, 2)
    assert rc.more_redundant_experts(spec, 8, 2, grow3) == 3
    assert rc.more_redundant_experts(spec, 8, 2, grow3 - 1) == 2
    assert rc.more_redundant_experts(spec, 8, 2, 0) == 0
    everything = _rank_bytes(spec, 256) - _rank_bytes(spec, 0)
    assert rc.more_redundant_experts(spec, 8, 0, everything * 10) == 224  # 32 local + 224 = all 256 experts


def _headroom_notes(spec, mem: float, **row) -> tuple:
    """recommend's notes for one ISL-1024 row of `mem` GB per rank (no slots) on a 141 GB GPU."""
    return rc.recommend(spec, [_row(1024, 1.1, 1.3, mem=mem, sl=0, **row)]).notes


def _fits_note(mem: float, n: int) -> tuple:
    return (f"{141.0 - mem:.1f} GB free per rank: up to {n} more redundant experts per rank fit (try "
            f"--redundant-experts {n})",)


def _every_expert_note(mem: float) -> tuple:
    return (f"{141.0 - mem:.1f} GB free per rank: every expert fits on every rank (plain data parallel, "
            "no prefetch) -- compare with G=1",)


def test_the_headroom_notes():
    spec = _spec(isls=(1024,))
    per = _rank_bytes(spec, 3) - _rank_bytes(spec, 0)  # 3 more experts
    mem = 141.0 - per / 1e9 - 1e-6  # headroom just over 3 experts' bytes
    assert _headroom_notes(spec, mem) == _fits_note(mem, 3)
    assert _headroom_notes(spec, mem, local=253) == _every_expert_note(mem)  # 253 + 3 = every expert
    assert "up to 3 more redundant experts" in _headroom_notes(spec, mem, local=252)[0]


def test_a_measured_slice_efficiency_names_its_best_size():
    cal = dataclasses.replace(Calibration(), slice_efficiency=((MiB, 0.8), (2 * MiB, 0.9), (4 * MiB, 0.9),
                                                                (8 * MiB, 0.85)))
    r = rc.recommend(_spec(isls=(1024,), calibration=cal), [_row(1024, 1.1, 1.3)])
    assert r.notes == ("measured slice efficiency is best at 4 MiB (0.90 of bulk)",)
    r = rc.recommend(_spec(isls=(1024,), calibration=cal), [_row(1024, 1.1, 1.3, sl=0)])
    assert r.notes == ()


# ---- values the verdict reads that the cases above do not reach ----------------------------------------------------
def test_a_calibration_that_measured_the_peer_copies_settles_a_gpu_with_no_published_measurement():
    """b200 names no published peer-copy measurement (its spec's peer.evidence is null): with no calibration a
    marginal verdict asks for one; a calibration that measured the peer copies (peer_copy_gbps) answers it, and
    the verdict names the input that moves the range instead."""
    rows = [_row(1024, 0.8, 1.2, 1.0, dep_on="interference")]
    r = rc.recommend(_spec("b200", isls=(1024,)), rows)
    assert r.reason.startswith("marginal: no measurement of peer copies on b200 (no calibration, no published "
                               "measurement: `dwdp calibrate` measures them); DWDP with ")
    cal = dataclasses.replace(Calibration(), peer_copy_gbps=700.0, sources=("peer.json",))
    r = rc.recommend(_spec("b200", isls=(1024,), calibration=cal), rows)
    assert r.reason == ("marginal: depends on interference - `dwdp calibrate` measures it (copies beside attention "
                        f"and GEMMs, 2+ GPUs); DWDP with {SETUP} predicts 0.80-1.20x (nominal 1.00x; geometric means "
                        "over ISL 1024) DWDP/DEP throughput")
    # the same in the note on the ISLs DWDP does not win
    rows = [_row(1024, 0.8, 1.2, dep_on="interference"), _row(4096, 1.1, 1.3)]
    r = rc.recommend(_spec("b200", isls=(1024, 4096), calibration=cal), rows)
    assert r.notes[0] == "elsewhere: ISL 1024 marginal (0.80-1.20x); use DEP where DWDP is not certain to win"


def test_dep_at_some_isls_and_marginal_at_others_does_not_use_dwdp():
    rows = [_row(1024, 0.5, 0.7), _row(4096, 0.8, 1.2, dep_on="interference")]
    r = rc.recommend(_spec(isls=(1024, 4096)), rows)
    assert (r.verdict, r.use_dwdp, r.to_dict()["use_dwdp"]) == ("marginal", False, False)


def test_a_run_of_three_planned_isls_inside_the_plan_is_named_by_its_ends():
    isls = (1024, 2048, 4096, 8192, 16384)
    assert rc.isl_set([8192, 2048, 4096], isls) == "ISL 2048-8192"
    rows = [_row(1024, 0.5, 0.7), _row(2048, 0.8, 1.2, dep_on="interference"),
            _row(4096, 0.8, 1.2, dep_on="interference"), _row(8192, 0.8, 1.2, dep_on="interference"),
            _row(16384, 0.5, 0.7)]
    r = rc.recommend(_spec(isls=isls), rows)
    assert r.reason.startswith("DEP at ISL 1024, 16384 (0.50-0.70x, 0.50-0.70x: the whole range below 1); marginal at "
                               f"ISL 2048-8192 with {SETUP} (0.80-1.20x, 0.80-1.20x, 0.80-1.20x; depends on ")


def test_extrapolation_clause_keeps_a_phases_farthest_reach_whatever_the_row_order():
    rows = [_row(1024, 1, 1, extrap={"a": "4.0x the last row"}), _row(4096, 1, 1, extrap={"a": "2.0x the last row"})]
    assert rc.extrapolation_clause(rows) == (
        "; range widened 5% per doubling for cells past the kernel tables: a 4.0x the last row")


def test_plain_dp_against_a_one_isl_dwdp_setup_names_its_group():
    rows = [_row(1024, 1.0, 1.0, 1.0, g=1, sl=0, mem=60.0, tps=990.0), _row(1024, 1.1, 1.3, g=4, tps=1000.0)]
    r = rc.recommend(_spec(isls=(1024,)), rows)
    assert r.reason == ("plain data parallel (G=1): every expert fits on every rank (60.0 GB per rank <= 141.0 GB): "
                        "nothing to fetch, no all-to-all; 0.99x DWDP4's throughput per GPU (ties within 2% go to G=1)")


def test_a_plan_of_g2_alone_that_does_not_fit_gets_memory_advice_not_no_group():
    parts = {"routed experts held": 150.0}
    rows = [_row(1024, 1.1, 1.3, g=2, fits=False, mem=150.0, mem_dep=120.0, parts=parts, small=4)]
    r = rc.recommend(_spec(isls=(1024,)), rows)
    assert r.reason == ("use DEP here: memory does not fit: DWDP2 does not fit at ISL 1024 (150.0 GB per rank > "
                        "141.0 GB): DEP2 there (120.0 GB); the smallest dwdp_size that fits every ISL is 4 (DWDP2 at "
                        "ISL 1024: routed experts held 150.0 GB)")


def test_nothing_of_dwdp_fits_says_use_dwdp_false_in_json():
    """JSON readers test `use_dwdp` for false: each of the three answers where no DWDP rank fits says false, not
    null."""
    for rows in ([_row(1024, 1.0, 1.0, g=1, fits=False)],  # no group above 1
                 [_row(1024, 1.1, 1.3, fits=False, mem=145.0)],  # DEP fits
                 [_row(1024, 1.1, 1.3, fits=False, dep_fits=False, mem=150.0, mem_dep=145.0)]):  # nothing fits
        d = rc.recommend(_spec(isls=(1024,)), rows).to_dict()
        assert d["use_dwdp"] is False and d["dwdp_size"] is None


def _one_more_expert_bytes(spec, redundant=0):
    return _rank_bytes(spec, redundant + 1) - _rank_bytes(spec, redundant)


def test_exactly_one_more_redundant_expert_fitting_is_suggested():
    spec = _spec(isls=(1024,))
    one = _one_more_expert_bytes(spec)
    two = _rank_bytes(spec, 2) - _rank_bytes(spec, 0)
    assert rc.more_redundant_experts(spec, 8, 0, (one + two) / 2) == 1
    mem = 141.0 - (one + two) / 2 / 1e9  # room for one more expert, not two
    assert _headroom_notes(spec, mem) == _fits_note(mem, 1)
    assert _headroom_notes(spec, mem, local=255) == _every_expert_note(mem)  # 255 + 1 = every expert


def test_a_setup_holding_every_expert_gets_no_headroom_note():
    """G=8 with 224 redundant experts: each rank holds all 256 (32 + 224), so no more fit and nothing is suggested."""
    spec = _spec(isls=(1024,))
    assert rc.more_redundant_experts(spec, 8, 224, 1e12) == 0
    r = rc.recommend(spec, [_row(1024, 1.1, 1.3, red=224, sl=0, mem=100.0, local=256)])
    assert r.notes == ()


def test_the_headroom_is_priced_in_bytes_exactly():
    """Half a byte short of one more expert's bytes: none suggested; half a byte over: one (the headroom is GB x 1e9
    bytes, the unit memory_per_rank_gb is in)."""
    spec = _spec(isls=(1024,))
    one = _one_more_expert_bytes(spec)
    r = rc.recommend(spec, [_row(1024, 1.1, 1.3, mem=141.0 - (one - 0.5) / 1e9, sl=0)])
    assert r.notes == ()
    r = rc.recommend(spec, [_row(1024, 1.1, 1.3, mem=141.0 - (one + 0.5) / 1e9, sl=0)])
    assert r.notes[0].endswith("up to 1 more redundant experts per rank fit (try --redundant-experts 1)")


def test_more_redundant_experts_reaches_every_expert_when_the_group_is_the_expert_count():
    """Mixtral 8x7B over G=8: one expert per rank, so up to 7 redundant experts (every expert on every rank)."""
    spec = dataclasses.replace(_spec(), model=build_spec(build_parser().parse_args(
        ["plan", "--model", "mixtral-8x7b", "--gpu", "h200", "--dwdp-size", "8", "--isl", "1024"])).model)
    assert spec.model.num_experts == 8
    assert rc.more_redundant_experts(spec, 8, 0, 1e15) == 7
    assert rc.more_redundant_experts(spec, 8, 5, 1e15) == 2


def test_with_one_moe_layer_each_redundant_expert_frees_memory():
    """One MoE layer, two prefetch slots (prefetcher.prefetch_slot_count's floor): a redundant expert adds one
    layer's copy and frees two slots' copies, so every further one fits even with no headroom."""
    model = dataclasses.replace(_spec().model, num_layers=4, first_k_dense=3, mtp_layers=0)  # one MoE layer
    spec = dataclasses.replace(_spec(), model=model)
    assert _rank_bytes(spec, 2) < _rank_bytes(spec, 1)
    assert rc.more_redundant_experts(spec, 8, 1, 0) == 223  # 32 + 1 + 223 = all 256 experts
