"""Pinned values of perf/uncertainty.py, the ends of the planner's uncertain inputs: each interference prior at its
low / high end (1.5x / 0.5x its excess over 1; from none to 2x where nothing measured the family's copies), the
grouped GEMM's low end at the dense GEMMs' prior, a scenario's inputs moved one at a time or held fixed, compute
efficiencies scaled and capped at 1, the peer-copy evidence and its range, the time-weighted slowdown, and a layer's
phases under a scenario. Every expected number is written out here by hand from the docstring's rules."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from dwdp_trtllm.cli import build_parser
from dwdp_trtllm.commands.plan import build_spec
from dwdp_trtllm.perf import uncertainty as u

NOMINAL = {"attention_core": 1.19, "gemm": 1.07, "memory_bound": 1.18, "grouped_gemm": 1.0}


def _approx(d):
    return pytest.approx(d, rel=1e-12)


def test_interference_ends_are_half_and_one_and_a_half_of_each_excess():
    assert u.interference_at("nominal", None) == NOMINAL
    assert u.interference_at("low", None) == _approx(
        {"attention_core": 1.285, "gemm": 1.105, "memory_bound": 1.27, "grouped_gemm": 1.07})
    assert u.interference_at("high", None) == _approx(
        {"attention_core": 1.095, "gemm": 1.035, "memory_bound": 1.09, "grouped_gemm": 1.0})


def test_interference_without_evidence_spans_none_to_twice_each_excess():
    assert u.interference_at("low", None, wide=True) == _approx(
        {"attention_core": 1.38, "gemm": 1.14, "memory_bound": 1.36, "grouped_gemm": 1.14})
    assert u.interference_at("high", None, wide=True) == _approx(
        {"attention_core": 1.0, "gemm": 1.0, "memory_bound": 1.0, "grouped_gemm": 1.0})
    assert u.interference_at("nominal", None, wide=True) == NOMINAL


def test_a_given_or_measured_interference_is_fixed_at_every_end():
    for which in ("low", "nominal", "high"):
        assert u.interference_at(which, 1.3) == {k: 1.3 for k in NOMINAL}
        got = u.interference_at(which, {"gemm": 1, "attention_core": 1.25}, wide=True)
        assert got == {"attention_core": 1.25, "gemm": 1.0, "memory_bound": 1.18, "grouped_gemm": 1.0}
        assert all(type(v) is float for v in got.values())


def test_the_low_scenario_is_every_input_at_dwdps_worse_end():
    sc = u.scenario("low")
    assert (sc.name, sc.peer, sc.comm, sc.extrap, sc.routing, sc.eff) == ("low", 0.75, "low", -1.0, "balanced", "low")
    assert sc.interference == _approx({"attention_core": 1.285, "gemm": 1.105, "memory_bound": 1.27,
                                       "grouped_gemm": 1.07})
    sc = u.scenario("high", peer_range=(0.2, 0.9))
    assert (sc.name, sc.peer, sc.comm, sc.extrap, sc.routing, sc.eff) == ("high", 0.9, "high", 1.0, "skewed", "high")
    assert sc.interference == _approx({"attention_core": 1.095, "gemm": 1.035, "memory_bound": 1.09,
                                       "grouped_gemm": 1.0})
    sc = u.scenario("low", peer_range=(0.2, 0.9), wide_interference=True)
    assert sc.peer == 0.2 and sc.interference["attention_core"] == pytest.approx(1.38)
    sc = u.scenario("nominal")
    assert (sc.name, sc.peer, sc.comm, sc.extrap, sc.routing, sc.eff) == ("nominal", 1.0, "nominal", 0.0, "balanced",
                                                                          "nominal")
    assert sc.interference == NOMINAL


def test_only_one_input_moves_and_fixed_inputs_stay_nominal():
    sc = u.scenario("high", only="routing")
    assert (sc.name, sc.peer, sc.comm, sc.extrap, sc.routing, sc.eff) == ("high:routing", 1.0, "nominal", 0.0,
                                                                          "skewed", "nominal")
    assert sc.interference == NOMINAL
    sc = u.scenario("low", only="peer bandwidth")
    assert (sc.name, sc.peer, sc.comm, sc.extrap) == ("low:peer bandwidth", 0.75, "nominal", 0.0)
    sc = u.scenario("low", only="extrapolated table cells")
    assert (sc.peer, sc.extrap, sc.eff) == (1.0, -1.0, "nominal")
    sc = u.scenario("low", only="compute efficiencies")
    assert (sc.eff, sc.comm) == ("low", "nominal")
    sc = u.scenario("low", fixed=frozenset({"peer bandwidth", "interference", "DEP communication"}))
    assert (sc.peer, sc.comm, sc.extrap, sc.eff) == (1.0, "nominal", -1.0, "low") and sc.interference == NOMINAL
    sc = u.scenario("high", fixed=frozenset({"routing"}))
    assert sc.routing == "balanced" and sc.comm == "high"


def _gpu():
    return build_spec(build_parser().parse_args(["plan", "--gpu", "h200"])).gpu


def test_scaled_gpu_scales_efficiencies_and_caps_at_one():
    g = replace(_gpu(), gemm_eff={"bf16": 0.9, "fp8": 0.6}, attention_eff=0.7, hbm_eff=0.82)
    assert u.scaled_gpu(g, "nominal") is g
    lo = u.scaled_gpu(g, "low")
    assert lo.gemm_eff == _approx({"bf16": 1.0, "fp8": 0.75})
    assert (lo.attention_eff, lo.hbm_eff) == _approx((0.875, 1.0))
    hi = u.scaled_gpu(g, "high")
    assert hi.gemm_eff == _approx({"bf16": 0.675, "fp8": 0.45})
    assert (hi.attention_eff, hi.hbm_eff) == _approx((0.525, 0.615))
    assert g.gemm_eff == {"bf16": 0.9, "fp8": 0.6}  # the original is not changed


def test_peer_evidence_names_what_no_one_measured():
    assert u.peer_evidence(SimpleNamespace(name="x"), 8, True) == ""
    assert u.peer_evidence(SimpleNamespace(name="mi300x", peer_evidence=None), 8, False) == (
        "peer copies on mi300x (no calibration, no published measurement: `dwdp calibrate` measures them)")
    assert u.peer_evidence(object(), 8, False).startswith("peer copies on this GPU (no calibration")
    ev = SimpleNamespace(name="mi355x", peer_evidence="a blog", peer_measured_peers=3)
    assert u.peer_evidence(ev, 4, False) == ""  # 3 peers, as measured
    assert u.peer_evidence(ev, 5, False) == ("peer copies from 4 peers at once on mi355x (the published one pulled "
                                             "from 3: a blog; `dwdp calibrate` measures them)")
    assert u.peer_evidence(SimpleNamespace(name="h200", peer_evidence="nccl"), 64, False) == ""  # no count: trusted
    one = SimpleNamespace(name="g", peer_evidence="e", peer_measured_peers=0.5)
    assert u.peer_evidence(one, 1, False) != ""  # a group of 1 still counts one peer


def test_peer_range_follows_the_evidence():
    ev = SimpleNamespace(name="mi355x", peer_evidence="a blog", peer_measured_peers=3)
    assert u.peer_range(ev, 8, True) == (0.9, 1.0)
    assert u.peer_range(ev, 8, False) == (0.2, 1.0)
    assert u.peer_range(ev, 4, False) == (0.75, 1.0)


def test_effective_slowdown_is_time_weighted():
    """2 us at 1.5x and 6 us at 1.1x: (3 + 6.6) / 8 = 1.2; a rank with no compute is not slowed (1.0)."""
    got = u.effective_slowdown({"a": np.array([2.0, 0.0, 1.0]), "b": np.array([6.0, 0.0, 0.0])}, {"a": 1.5, "b": 1.1})
    assert got.tolist() == pytest.approx([1.2, 1.0, 1.5], rel=1e-12)
    assert float(u.effective_slowdown({"a": 2, "b": 6}, {"a": 1.5, "b": 1.1})) == pytest.approx(1.2)


def _ph():
    return SimpleNamespace(experts_dep_S=np.array([100.0]), beyond_dep_S=np.array([2.0]),
                           experts_dwdp_SR=np.array([[50.0, 80.0]]), beyond_dwdp_SR=np.array([[1.0, 0.0]]),
                           comm_S=np.array([30.0]), comm_alt_S=np.array([40.0]), beyond={"DEP communication": 1.0},
                           own_SR=np.array([[20.0, 20.0]]), core_SR=np.array([[10.0, 10.0]]),
                           gemm_SR=np.array([[10.0, 10.0]]), membound_SR=np.array([[0.0, 0.0]]))


def test_apply_the_low_end_on_the_trtllm_target():
    """Extrapolated cells 5% per doubling at DWDP's worse end: DEP's experts x 0.95^2, DWDP's x 1.05^1; DEP's
    communication the faster of its two paths (30 us) x 0.95^1; the prefetch at the peer's low end; interference
    time-weighted over attention 10, GEMM 10 and the DWDP rank's experts."""
    sc = u.scenario("low")
    a = u.apply(_ph(), sc, 60.0, "trtllm")
    assert a.experts_dep_S.tolist() == pytest.approx([100 * 0.95 ** 2])
    assert a.own_SR.tolist() == [[20.0, 20.0]]
    assert a.compute_SR.shape == (1, 2) and a.compute_SR[0].tolist() == pytest.approx([20 + 50 * 1.05, 20 + 80.0])
    assert a.comm_S.tolist() == pytest.approx([30 * 0.95])
    assert a.prefetch_us == pytest.approx(60 / 0.75)
    f = sc.interference
    want = [(10 * f["attention_core"] + 10 * f["gemm"] + d * f["grouped_gemm"]) / (20 + d) for d in (52.5, 80.0)]
    assert a.slowdown_SR.shape == (1, 2) and a.slowdown_SR[0].tolist() == pytest.approx(want, rel=1e-12)


def test_apply_the_high_end_and_the_engine_target():
    sc = u.scenario("high")
    a = u.apply(_ph(), sc, 60.0, "trtllm")
    assert a.comm_S.tolist() == pytest.approx([40 * 1.05])  # the slower path, extrapolated at DWDP's better end
    assert a.experts_dep_S.tolist() == pytest.approx([100 * 1.05 ** 2])
    assert a.compute_SR[0].tolist() == pytest.approx([20 + 50 * 0.95, 100.0])
    nominal = u.apply(_ph(), u.scenario("nominal"), 60.0, "trtllm")
    assert nominal.comm_S.tolist() == [30.0] and nominal.prefetch_us == 60.0
    # engine: all-to-all efficiency 0.77 nominal, 0.90 at DEP's fast end, 0.60 at its slow end; no alternate path
    assert u.apply(_ph(), u.scenario("low"), 60.0, "engine").comm_S.tolist() == pytest.approx([30 * 0.77 / 0.90])
    assert u.apply(_ph(), u.scenario("high"), 60.0, "engine").comm_S.tolist() == pytest.approx([30 * 0.77 / 0.60])
    assert u.apply(_ph(), u.scenario("nominal"), 60.0, "engine").comm_S.tolist() == [30.0]
    ph = _ph()
    ph.beyond = {}
    assert u.apply(ph, u.scenario("high"), 60.0, "trtllm").comm_S.tolist() == pytest.approx([40.0])


def test_dep_communication_ends_take_the_faster_and_the_slower_path_whichever_it_is():
    ph = _ph()
    ph.comm_alt_S = np.array([20.0])  # the other path faster than the priced one
    assert u.apply(ph, u.scenario("low"), 60.0, "trtllm").comm_S.tolist() == pytest.approx([20 * 0.95])
    assert u.apply(ph, u.scenario("high"), 60.0, "trtllm").comm_S.tolist() == pytest.approx([30 * 1.05])


def test_a_rank_with_under_one_us_of_compute_is_weighted_by_its_own_time():
    got = u.effective_slowdown({"a": np.array([0.25]), "b": np.array([0.25])}, {"a": 1.5, "b": 1.1})
    assert got.tolist() == pytest.approx([1.3], rel=1e-12)


def test_a_two_rank_group_pulls_from_one_peer_and_attention_is_capped_too():
    one = SimpleNamespace(name="g", peer_evidence="e", peer_measured_peers=1)
    assert u.peer_evidence(one, 2, False) == ""
    g = replace(_gpu(), attention_eff=0.9)
    assert u.scaled_gpu(g, "low").attention_eff == 1.0
