"""sizing/metrics.py pinned to hand computations on runs small enough to count by hand (each request's arrival,
first token and finish given): the steady window, the tokens inside it, TPOT / TPS per user, offered and goodput,
the SLO check and its bounds. Every expected number is worked out in the test's comments, never by the module."""
import math

import numpy as np
import pytest

from dwdp_trtllm.errors import ConfigError
from dwdp_trtllm.sizing.metrics import Metrics, Slo, meets, metric_range, steady_window, summarize, tokens_between
from dwdp_trtllm.sizing.simulator import SimResult


def _run(arrival, first, done, osl, window):
    arrival = np.asarray(arrival, float)
    return SimResult(arrival, np.asarray(first, float), np.asarray(done, float), np.full(arrival.size, 100),
                     np.asarray(osl, int), float(window), 0.0, 0, 0.0)


# ---- Slo.check: each bound, inclusive at the top, exclusive at 0 ----------------------------------------------------
@pytest.mark.parametrize("kw,arg,hi", [("ttft_p50_s", "--ttft-p50", "3600"), ("ttft_p99_s", "--ttft-p99", "3600"),
                                       ("tps_user", "--tps-user", "100000")])
def test_slo_bounds_name_the_flag(kw, arg, hi):
    top = float(hi)
    Slo(**{kw: top}).check()  # the bound itself is accepted
    Slo(**{kw: 1e-6}).check()
    for bad in (0.0, -1.0, top * 1.001, math.inf, math.nan):
        with pytest.raises(ConfigError) as e:
            Slo(**{kw: bad}).check()
        assert e.value.key == arg
        assert e.value.expected == f"expected a number in (0, {hi}], got {bad}"


def test_slo_p50_above_p99_is_refused_and_equal_is_accepted():
    Slo(ttft_p50_s=2.0, ttft_p99_s=2.0).check()
    Slo(ttft_p50_s=2.0).check()
    Slo(ttft_p99_s=2.0).check()
    with pytest.raises(ConfigError) as e:
        Slo(ttft_p50_s=2.5, ttft_p99_s=2.0).check()
    assert e.value.key == "--ttft-p50"
    assert e.value.expected == "expected at most --ttft-p99 (2 s), got 2.5 s"


# ---- the steady window and the tokens inside it ---------------------------------------------------------------------
def test_steady_window_starts_after_one_median_lifetime():
    # lifetimes (finish - arrival) 1, 3, 4 s (the unfinished request does not count): median 3 s; window ends at 10 s
    r = _run([0, 1, 2, 3], [0.5, 2, 3, 4], [1, 4, 6, math.nan], [2, 2, 2, 2], 10)
    assert steady_window(r) == (3.0, 10.0)


def test_steady_window_warm_up_is_at_most_half_the_span_and_never_negative():
    long = _run([0, 1], [5, 6], [9, 10], [2, 2], 10)  # lifetimes 9 s each: capped at 10 / 2
    assert steady_window(long) == (5.0, 10.0)
    none = _run([0, 1], [0.5, 1.5], [math.nan, math.nan], [2, 2], 8)  # nothing finished: no warm-up
    assert steady_window(none) == (0.0, 8.0)
    instant = _run([0, 1], [0, 1], [0, 1], [1, 1], 8)  # zero lifetimes: the warm-up is 0, not a floor
    assert steady_window(instant) == (0.0, 8.0)


def test_tokens_between_spreads_the_rest_evenly_after_the_first_token():
    # one request: first token at 2 s, finish at 6 s, OSL 5: its other 4 tokens spread over [2, 6], 1 per second
    r = _run([0], [2], [6], [5], 10)
    assert tokens_between(r, 3, 5) == pytest.approx(2.0)  # no first token, 2 s of the rest
    assert tokens_between(r, 2, 6) == pytest.approx(5.0)  # all of it, the first token at the window's edge counted
    assert tokens_between(r, 0, 2) == pytest.approx(1.0)  # the first token only (edge inclusive)
    assert tokens_between(r, 6, 9) == pytest.approx(0.0)  # after the finish
    assert tokens_between(r, 1, 4) == pytest.approx(1.0 + 2.0)
    assert tokens_between(r, 5, 8) == pytest.approx(1.0)
    unfinished = _run([0, 0], [2, 2], [6, math.nan], [5, 5], 10)  # an unfinished request adds nothing
    assert tokens_between(unfinished, 0, 10) == pytest.approx(5.0)


# ---- summarize: every field of a four-request run --------------------------------------------------------------------
def test_summarize_a_run_counted_by_hand():
    # arrivals 0, 1, 2, 11 s (the last after the 10 s window); TTFT 0.5, 1, 2, 1 s; OSL 11, 11, 1, 11;
    # finishes first + 1, + 2, (OSL 1: at the first token), + 1 s
    arrival = [0.0, 1.0, 2.0, 11.0]
    first = [0.5, 2.0, 4.0, 12.0]
    done = [1.5, 4.0, 4.0, 13.0]
    r = _run(arrival, first, done, [11, 11, 1, 11], 10)
    m = summarize(r, 4, Slo())
    # TPOT over OSL > 1 requests: 1/10, 2/10, 1/10 s -> median 0.1 s, 10 tokens/s per user
    assert m.tpot_s == pytest.approx(0.1) and m.tps_user == pytest.approx(10.0)
    # TTFT percentiles over 0.5, 1, 2, 1 (numpy's linear): p50 1.0, p99 = 1 + 0.97 x (2 - 1) = 1.97
    assert m.ttft_p50_s == pytest.approx(1.0) and m.ttft_p99_s == pytest.approx(1.97)
    # three arrivals inside the 10 s window
    assert m.offered_rps == pytest.approx(3 / 10) and m.goodput_rps == pytest.approx(3 / 10)
    assert (m.requests, m.completed) == (4, 4)
    # lifetimes 1.5, 3, 2, 2 -> median 2 s: window [2, 10]; tokens in it: request 1's tokens from 2 to 4 s
    # (first token at 2 s counted + 10 tokens over [2, 4]) = 11, request 2's single token at 4 s = 1, request 0
    # nothing (done by 1.5 s): 12 tokens / 8 s / 4 GPUs
    assert m.tps_window == (2.0, 10.0)
    assert m.output_tps_per_gpu == pytest.approx(12 / 8 / 4)


def test_summarize_counts_offered_and_goodput_over_the_stated_span():
    r = _run([0, 1, 2, 3], [0.5, 1.5, 2.5, 3.5], [1, 2, 3, 4], [2, 2, 2, 2], 3)
    # the run's window is 3 s (last arrival), the stated span 8 s: 4 requests / 8 s; a shorter span changes nothing
    assert summarize(r, 1, Slo(), span_s=8.0).offered_rps == pytest.approx(4 / 8)
    assert summarize(r, 1, Slo(), span_s=8.0).goodput_rps == pytest.approx(4 / 8)
    assert summarize(r, 1, Slo(), span_s=2.0).offered_rps == pytest.approx(4 / 3)
    assert summarize(r, 1, Slo()).offered_rps == pytest.approx(4 / 3)


def test_goodput_per_request_ttft_and_tps_user_slos():
    # TTFT 1, 2, 3 s; TPOT 0.1, 0.05, 0.2 s (TPS/user 10, 20, 5); window 10 s
    arrival = [0.0, 1.0, 2.0]
    first = [1.0, 3.0, 5.0]
    done = [2.0, 4.0, 7.0]  # OSL 11: (done - first) / 10
    r = _run(arrival, first, done, [11, 21, 11], 10)
    assert summarize(r, 1, Slo(ttft_p99_s=2.0)).goodput_rps == pytest.approx(2 / 10)  # TTFT 3 s out
    assert summarize(r, 1, Slo(ttft_p99_s=3.0)).goodput_rps == pytest.approx(3 / 10)  # the bound is inclusive
    assert summarize(r, 1, Slo(tps_user=10.0)).goodput_rps == pytest.approx(2 / 10)  # TPS/user 5 out
    assert summarize(r, 1, Slo(tps_user=10.0, ttft_p99_s=1.5)).goodput_rps == pytest.approx(1 / 10)
    # a p50 target does not filter requests (it is a distribution's target, checked by meets)
    assert summarize(r, 1, Slo(ttft_p50_s=0.1)).goodput_rps == pytest.approx(3 / 10)


def test_goodput_keeps_a_one_token_request_under_a_tps_user_slo_and_drops_an_unfinished_one():
    r = _run([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], [1.0, 12.0, math.nan], [1, 11, 11], 10)
    # request 0 has no decode (OSL 1): no TPS/user to miss; request 1: TPOT 1 s, 1 token/s; request 2 unfinished
    m = summarize(r, 1, Slo(tps_user=0.5))
    assert m.goodput_rps == pytest.approx(2 / 10) and m.completed == 2 and m.requests == 3
    assert summarize(r, 1, Slo(tps_user=2.0)).goodput_rps == pytest.approx(1 / 10)
    assert m.tpot_s == pytest.approx(1.0)


def test_summarize_without_decode_or_without_first_tokens():
    r = _run([0.0, 1.0], [0.5, 1.5], [0.5, 1.5], [1, 1], 4)  # OSL 1 only: no TPOT, no TPS/user
    m = summarize(r, 1, Slo())
    assert math.isnan(m.tpot_s) and math.isnan(m.tps_user)
    assert m.ttft_p50_s == pytest.approx(0.5)
    stuck = _run([0.0, 1.0], [math.nan, math.nan], [math.nan, math.nan], [2, 2], 4)
    s = summarize(stuck, 1, Slo())
    assert s.ttft_p50_s == math.inf and s.ttft_p99_s == math.inf and s.completed == 0 and s.goodput_rps == 0.0


# ---- meets: the distribution's SLOs and completion -------------------------------------------------------------------
def _metrics(**kw):
    base = dict(ttft_p50_s=1.0, ttft_p99_s=2.0, tpot_s=0.05, tps_user=20.0, output_tps_per_gpu=1.0,
                goodput_rps=1.0, requests=10, completed=10)
    return Metrics(**{**base, **kw})


def test_meets_each_target_inclusive():
    m = _metrics()
    assert meets(m, Slo()) and meets(m, Slo(ttft_p50_s=1.0, ttft_p99_s=2.0, tps_user=20.0))
    assert not meets(m, Slo(ttft_p50_s=0.99))
    assert not meets(m, Slo(ttft_p99_s=1.99))
    assert not meets(m, Slo(tps_user=20.01))
    assert not meets(_metrics(tps_user=math.nan), Slo(tps_user=1.0))
    assert meets(_metrics(tps_user=math.nan), Slo())
    assert not meets(_metrics(completed=9), Slo())


def test_metric_range_is_the_hull_of_the_finite_values():
    m, lo, hi = _metrics(ttft_p50_s=2.0), _metrics(ttft_p50_s=3.0), _metrics(ttft_p50_s=1.5)
    assert metric_range(m, lo, hi, "ttft_p50_s") == (1.5, 3.0)
    assert metric_range(m, None, _metrics(ttft_p50_s=math.inf), "ttft_p50_s") == (2.0, 2.0)
    both = metric_range(_metrics(tps_user=math.nan), _metrics(tps_user=math.nan), None, "tps_user")
    assert all(math.isnan(v) for v in both)


def test_to_dict_rounds_floats_and_lists_the_window():
    d = _metrics(ttft_p50_s=1.23456789, tpot_s=math.inf, tps_window=(2.5, 10.0)).to_dict()
    assert d["ttft_p50_s"] == 1.234568 and d["tpot_s"] == math.inf
    assert d["tps_window"] == [2.5, 10.0] and d["requests"] == 10 and math.isnan(d["offered_rps"])
    assert set(d) == {"ttft_p50_s", "ttft_p99_s", "tpot_s", "tps_user", "output_tps_per_gpu", "goodput_rps",
                      "requests", "completed", "offered_rps", "tps_window"}


def test_short_runs_and_short_decodes_counted_exactly():
    # one request decoding 2 tokens (OSL 3) in 0.5 s after its first token at 2 s: tokens spread over half a second
    r = _run([0], [2], [2.5], [3], 10)
    assert tokens_between(r, 2.1, 2.35) == pytest.approx(2 * 0.25 / 0.5)
    # OSL 2: one decode token, TPOT = its whole decode time (not halved, not dropped)
    two = _run([0.0, 1.0], [1.0, 2.0], [1.3, 2.3], [2, 2], 10)
    assert summarize(two, 1, Slo()).tpot_s == pytest.approx(0.3)
    # a 0.5 s run with no stated span: offered over 0.5 s, not over a second
    half = _run([0.0, 0.5], [0.1, 0.6], [0.2, 0.7], [2, 2], 0.5)
    assert summarize(half, 1, Slo()).offered_rps == pytest.approx(2 / 0.5)
    # a 1 s window after a 0.2 s warm-up: the steady window is 0.8 s long
    short = _run([0.0, 0.1], [0.1, 0.2], [0.2, 0.3], [2, 2], 1.0)
    m = summarize(short, 1, Slo())
    assert m.tps_window == (0.2, 1.0)
    assert m.output_tps_per_gpu == pytest.approx(tokens_between(short, 0.2, 1.0) / 0.8)
    # request 1: its first token at 0.2 s and its one decoded token; request 0 finished at 0.2 s
    assert tokens_between(short, 0.2, 1.0) == pytest.approx(2.0)


def test_window_reported_to_the_millisecond():
    r = _run([0.0, 1.0], [0.5, 1.5], [1.23456, 2.23456], [2, 2], 10.12345)
    assert summarize(r, 1, Slo()).tps_window == (1.235, 10.123)


def test_zero_decode_time_has_no_tps_user_and_no_decode_has_no_warning():
    import warnings

    r = _run([0.0, 1.0], [0.5, 1.5], [0.5, 1.5], [5, 5], 4)  # finished at the first token: TPOT 0
    m = summarize(r, 1, Slo())
    assert m.tpot_s == 0.0 and math.isnan(m.tps_user)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "All-NaN slice" warning on a run without decode
        assert math.isnan(summarize(_run([0.0], [0.5], [0.5], [1], 4), 1, Slo()).tpot_s)


def test_ttft_median_between_two_requests_and_goodput_only_inside_the_window():
    r = _run([0.0, 1.0, 2.0, 11.0], [1.0, 3.0, 5.0, 12.0], [2.0, 4.0, 6.0, math.nan], [2, 2, 2, 2], 10)
    m = summarize(r, 1, Slo(ttft_p99_s=5.0))
    assert m.ttft_p50_s == pytest.approx(1.5)  # TTFTs 1, 2, 3, 1: the median of 1, 1, 2, 3
    # every TTFT is within 5 s, but the last request arrived after the 10 s window (and never finished)
    assert m.goodput_rps == pytest.approx(3 / 10)
    late = _run([0.0, 11.0], [1.0, 12.0], [2.0, 13.0], [2, 2], 10)
    assert summarize(late, 1, Slo(ttft_p99_s=5.0)).goodput_rps == pytest.approx(1 / 10)
    spread = _run([0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0], [2, 2, 2, 2], 10)
    assert summarize(spread, 1, Slo()).ttft_p50_s == pytest.approx(2.5)
