"""sizing/traffic.py's traffic pinned: the bounds a user may ask and the one-line refusal naming each flag, the
length distributions' support (uniform_ratio's inclusive [ceil(ratio x mean), mean], normal's clip to [1, 2^20] and
its spread), Poisson arrivals (count, mean gap, the window), the closed loop's request count, the label `dwdp size`
prints, and a Mooncake trace read and written (its refusals naming file, line and key; sorting; whole ms)."""
import json
import math

import numpy as np
import pytest

from dwdp_trtllm.sizing import traffic as tr
from dwdp_trtllm.spec.schema import ConfigError

L100, L10 = tr.LengthDist(100), tr.LengthDist(10)


def _refused(fn) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        fn()
    return e.value


# ---- lengths ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dist, key, expected", [
    (tr.LengthDist(0), "--isl", "expected a token count in [1, 1,048,576], got 0"),
    (tr.LengthDist(2 ** 20 + 1), "--isl", "expected a token count in [1, 1,048,576], got 1048577"),
    (tr.LengthDist(10, "weird"), "--isl-dist", "expected one of fixed, uniform_ratio, normal, got 'weird'"),
    (tr.LengthDist(10, "uniform_ratio", ratio=0.0), "--isl-ratio", "expected a number in (0, 1], got 0.0"),
    (tr.LengthDist(10, "uniform_ratio", ratio=1.01), "--isl-ratio", "expected a number in (0, 1], got 1.01"),
    (tr.LengthDist(10, "normal", cv=1.0), "--isl-cv", "expected a number in [0, 1), got 1.0"),
    (tr.LengthDist(10, "normal", cv=-0.01), "--isl-cv", "expected a number in [0, 1), got -0.01"),
    (tr.LengthDist(10, "normal", cv=math.nan), "--isl-cv", "expected a number in [0, 1), got nan")])
def test_a_length_outside_its_bounds_is_refused_naming_the_flag(dist, key, expected):
    e = _refused(lambda: dist.check("--isl"))
    assert (e.file, e.key, e.expected) == (None, key, expected)


def test_the_bounds_themselves_are_accepted():
    for d in (tr.LengthDist(1), tr.LengthDist(2 ** 20), tr.LengthDist(10, "uniform_ratio", ratio=1.0),
              tr.LengthDist(10, "normal", cv=0.0)):
        d.check("--isl")


def test_fixed_lengths_are_the_mean():
    got = tr.LengthDist(4096).draw(np.random.default_rng(0), 5)
    assert got.dtype == np.int64 and list(got) == [4096] * 5
    assert list(tr.LengthDist(4096, cv=0.3).draw(np.random.default_rng(0), 5)) == [4096] * 5  # cv is normal's only


def test_uniform_ratio_draws_every_whole_length_from_ceil_ratio_mean_to_the_mean():
    """mean 10, ratio 0.75: ceil(7.5) = 8, so 8, 9 and 10, each about a third of the draws."""
    got = tr.LengthDist(10, "uniform_ratio", ratio=0.75).draw(np.random.default_rng(1), 3000)
    assert got.dtype == np.int64
    values, counts = np.unique(got, return_counts=True)
    assert list(values) == [8, 9, 10] and counts.min() > 900
    assert set(tr.LengthDist(1, "uniform_ratio", ratio=0.1).draw(np.random.default_rng(1), 50)) == {1}  # ceil(0.1)


def test_normal_lengths_are_whole_with_the_stated_spread_clipped_to_one_and_the_maximum():
    got = tr.LengthDist(1000, "normal", cv=0.2).draw(np.random.default_rng(2), 20000)
    assert got.dtype == np.int64 and np.all(got == np.rint(got))
    assert got.mean() == pytest.approx(1000, rel=0.01) and got.std() == pytest.approx(200, rel=0.03)
    low = tr.LengthDist(2, "normal", cv=0.9).draw(np.random.default_rng(3), 2000)
    assert low.min() == 1 and np.mean(low == 1) > 0.1  # 2 +- 1.8: a draw under 0.5 rounds to 0 or less, clipped to 1
    high = tr.LengthDist(2 ** 20, "normal", cv=0.5).draw(np.random.default_rng(4), 2000)
    assert high.max() == 2 ** 20 and np.mean(high == 2 ** 20) > 0.4  # half the draws above the mean


# ---- the workload -------------------------------------------------------------------------------------------

BOTH = "give exactly one of --rate (requests/s), --concurrency (users) or --trace (a Mooncake-format JSONL file)"


@pytest.mark.parametrize("kw, key, expected", [
    (dict(), "--rate", BOTH), (dict(rate=1.0, concurrency=1), "--rate", BOTH),
    (dict(rate=0.0), "--rate", "expected requests per second in (0, 100000], got 0.0"),
    (dict(rate=100001.0), "--rate", "expected requests per second in (0, 100000], got 100001.0"),
    (dict(rate=math.inf), "--rate", "expected requests per second in (0, 100000], got inf"),
    (dict(concurrency=0), "--concurrency", "expected users in [1, 100000], got 0"),
    (dict(concurrency=100001), "--concurrency", "expected users in [1, 100000], got 100001"),
    (dict(rate=1.0, duration_s=0.99), "--duration", "expected seconds in [1, 86400], got 0.99"),
    (dict(rate=1.0, duration_s=86401.0), "--duration", "expected seconds in [1, 86400], got 86401.0"),
    (dict(rate=1.0, duration_s=math.nan), "--duration", "expected seconds in [1, 86400], got nan"),
    (dict(rate=1.0, requests=5), "requests",
     "expected a prompt count in [1, 200,000] with a closed loop (--concurrency), got 5"),
    (dict(concurrency=2, requests=0), "requests",
     "expected a prompt count in [1, 200,000] with a closed loop (--concurrency), got 0"),
    (dict(concurrency=2, requests=200001), "requests",
     "expected a prompt count in [1, 200,000] with a closed loop (--concurrency), got 200001"),
    (dict(rate=4.0, duration_s=50000.25), "--duration",
     "--rate x --duration is 200,001 requests; expected at most 200,000 (shorten --duration)"),
    (dict(rate=1.0, osl=tr.LengthDist(0)), "--osl", "expected a token count in [1, 1,048,576], got 0")])
def test_a_workload_outside_its_bounds_is_refused_naming_the_flag(kw, key, expected):
    t = tr.Traffic(**{"isl": L100, "osl": L10, **kw})
    e = _refused(lambda: tr.generate(t))
    assert (e.key, e.expected) == (key, expected)


def test_the_workload_bounds_themselves_are_accepted():
    for kw in (dict(rate=100000.0, duration_s=1.0), dict(rate=4.0, duration_s=50000.0),
               dict(concurrency=100000, duration_s=1.0, requests=200000), dict(concurrency=1, requests=1),
               dict(rate=1.0, duration_s=86400.0)):
        tr.Traffic(L100, L10, **kw).check()


def test_the_label_says_the_load_both_lengths_the_window_and_the_seed():
    t = tr.Traffic(tr.LengthDist(8192, "uniform_ratio"), tr.LengthDist(1024, "normal", cv=0.25), rate=2.5,
                   duration_s=60.0, seed=3)
    assert t.label() == "2.5 req/s Poisson, ISL U[0.8x,1x] 8192, OSL N(1024, cv 0.25), 60 s, seed 3"
    c = tr.Traffic(L100, L10, concurrency=4, duration_s=120.0)
    assert c.label() == "4 concurrent users, ISL 100, OSL 10, 120 s, seed 0"


def test_poisson_arrivals_count_gap_and_window():
    """100 req/s for 200 s: about 20,000 arrivals (Poisson: sd 141), exponential gaps of mean 10 ms (coefficient of
    variation 1), every arrival inside the window, sorted."""
    a = tr.generate(tr.Traffic(L100, L10, rate=100.0, duration_s=200.0, seed=7))
    assert abs(len(a) - 20000) < 5 * 141
    gaps = np.diff(np.concatenate([[0.0], a.t_s]))
    assert gaps.mean() == pytest.approx(0.01, rel=0.03) and gaps.std() / gaps.mean() == pytest.approx(1, rel=0.05)
    assert np.all(np.diff(a.t_s) > 0) and a.t_s[-1] <= 200.0
    assert a.duration_s == a.t_s[-1] and a.closed_users == 0 and a.closed_duration_s == 0.0
    assert list(a.isl[:3]) == [100] * 3 and list(a.osl[:3]) == [10] * 3 and a.label.startswith("100 req/s")


def test_a_rate_too_low_for_its_window_still_sends_its_first_request():
    """0.001 req/s for 1 s: the first arrival lands long after the window (mean 1000 s), kept all the same."""
    a = tr.generate(tr.Traffic(L100, L10, rate=0.001, duration_s=1.0, seed=0))
    assert len(a) == 1 and a.t_s[0] > 1.0 and a.duration_s == a.t_s[0]


ISL_U, OSL_N = tr.LengthDist(1000, "uniform_ratio"), tr.LengthDist(100, "normal", cv=0.3)


def _first_draws(rate: float, duration_s: float, seed: int):
    """The arrivals from the seed's own generator, as generate() drew them before it continued past them (written
    out here): ceil(rate x duration) exponential gaps, the prefix inside the window (the first arrival always), then
    that many ISLs and OSLs; and whether those gaps passed the window's end."""
    rng = np.random.default_rng(seed)
    n = max(1, int(np.ceil(rate * duration_s)))
    times = np.cumsum(rng.exponential(1.0 / rate, size=n))
    keep = times <= duration_s
    keep[0] = True
    n = int(keep.sum())
    return times[:n], ISL_U.draw(rng, n), OSL_N.draw(rng, n), bool(times[-1] > duration_s)


def test_poisson_arrivals_are_not_cut_at_rate_times_duration():
    """1 req/s for 60 s over 400 seeds: the count is Poisson(60), so its mean is 60 within a few standard errors
    (sqrt(60 / 400) = 0.39) and many seeds send more than 60; arrivals run to the window's end in every seed (no
    gap of 10 mean gaps before it: e^-10 per seed). Drawing only 60 gaps gave a mean of 57.1 and never more."""
    counts, lasts = [], []
    for seed in range(400):
        a = tr.generate(tr.Traffic(ISL_U, OSL_N, rate=1.0, duration_s=60.0, seed=seed))
        assert np.all(np.diff(a.t_s) > 0) and a.t_s[-1] <= 60.0 and len(a.isl) == len(a.osl) == len(a.t_s)
        counts.append(len(a))
        lasts.append(a.t_s[-1])
    assert abs(np.mean(counts) - 60.0) < 4 * math.sqrt(60.0 / 400)
    assert sum(c > 60 for c in counts) > 100
    assert min(lasts) > 60.0 - 10 * 1.0


@pytest.mark.parametrize("rate, duration_s", [(2.0, 30.0), (0.5, 2.0)])
def test_the_first_draws_are_unchanged_and_continued_only_inside_the_window(rate, duration_s):
    """A seed whose ceil(rate x duration) draws pass the window gives exactly those arrays; one whose draws end
    inside it gives them as its first requests, followed by arrivals (their lengths drawn alike) to the window's
    end. 0.5 req/s for 2 s draws one gap: a single arrival after 2 s is the whole result."""
    passed = continued = 0
    extra_isl = []
    for seed in range(60):
        t0, i0, o0, past = _first_draws(rate, duration_s, seed)
        a = tr.generate(tr.Traffic(ISL_U, OSL_N, rate=rate, duration_s=duration_s, seed=seed))
        k = len(t0)
        if past:
            passed += 1
            assert np.array_equal(a.t_s, t0) and np.array_equal(a.isl, i0) and np.array_equal(a.osl, o0)
        else:
            continued += 1
            assert len(a) >= k and np.array_equal(a.t_s[:k], t0)  # the next arrival may be past the window
            assert np.array_equal(a.isl[:k], i0) and np.array_equal(a.osl[:k], o0)
            assert np.all(np.diff(a.t_s) > 0) and a.t_s[-1] <= duration_s
            extra_isl.extend(a.isl[k:])
    assert passed and continued
    assert min(extra_isl) >= 800 and max(extra_isl) <= 1000 and len(set(extra_isl)) > 10


def test_arrivals_continued_past_the_first_draws_stop_at_the_request_limit():
    """1000 req/s for 200 s asks the limit itself (200,000, accepted): a seed whose first 200,000 arrivals are all
    inside the window sends exactly those, nothing refused."""
    for seed in range(10):
        t0, _, _, _ = _first_draws(1000.0, 200.0, seed)
        if len(t0) == tr.MAX_REQUESTS:
            a = tr.generate(tr.Traffic(ISL_U, OSL_N, rate=1000.0, duration_s=200.0, seed=seed))
            assert len(a) == tr.MAX_REQUESTS and np.array_equal(a.t_s, t0)
            return
    pytest.fail("no seed in 0..9 had its first 200,000 arrivals inside the window")


def test_the_closed_loop_draws_twenty_requests_per_user_second_or_the_stated_count():
    a = tr.generate(tr.Traffic(L100, L10, concurrency=3, duration_s=10.0))
    assert len(a) == 3 * 10 * 20 and np.all(np.isnan(a.t_s))
    assert (a.closed_users, a.closed_duration_s, a.duration_s) == (3, 10.0, 10.0)
    assert len(tr.generate(tr.Traffic(L100, L10, concurrency=3, duration_s=10.0, requests=7))) == 7
    assert len(tr.generate(tr.Traffic(L100, L10, concurrency=3, duration_s=1.5))) == 90  # 3 x 1.5 s x 20
    assert len(tr.generate(tr.Traffic(L100, L10, concurrency=2000, duration_s=10.0))) == 200000  # capped


def test_an_empty_arrival_list_spans_nothing():
    a = tr.Arrivals(np.array([]), np.array([], np.int64), np.array([], np.int64), "none")
    assert len(a) == 0 and a.duration_s == 0.0


# ---- trace files --------------------------------------------------------------------------------------------

def _trace(tmp_path, *lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def _row(ts, i, o):
    return json.dumps({"timestamp": ts, "input_length": i, "output_length": o})


def test_a_trace_is_sorted_by_time_relative_to_its_first_request_in_seconds(tmp_path):
    p = _trace(tmp_path, _row(101500.5, 30, 3), "", _row(1500, 10, 1), _row(1500, 20, 2.0), "  ", name="m.jsonl")
    a = tr.read_trace(p)
    assert list(a.t_s) == pytest.approx([0.0, 0.0, 100.0005])
    assert list(a.isl) == [10, 20, 30] and list(a.osl) == [1, 2, 3]  # equal times keep the file's order
    assert a.isl.dtype == np.int64 and a.osl.dtype == np.int64
    assert a.label == "trace m.jsonl: 3 requests over 100.0 s"


def test_many_requests_at_equal_times_keep_the_files_order(tmp_path):
    """100 lines alternating timestamps 1000 and 0 ms, ISL 1..100: the 50 at 0 first (ISL 2, 4, ..., 100), each
    group in file order (a stable sort; an unstable one reorders ties past 16 elements)."""
    p = _trace(tmp_path, *(_row(1000 * (k % 2), k, 1) for k in range(1, 101)))
    assert list(tr.read_trace(p).isl) == list(range(2, 101, 2)) + list(range(1, 100, 2))


def test_a_trace_lines_bounds_themselves_are_accepted(tmp_path):
    p = _trace(tmp_path, _row(0, 1, 1), _row(1e12, 2 ** 20, 2 ** 20))
    a = tr.read_trace(p)
    assert list(a.isl) == [1, 2 ** 20] and list(a.osl) == [1, 2 ** 20] and a.t_s[-1] == 1e9


@pytest.mark.parametrize("line, key, expected", [
    (_row(-1, 10, 1), "timestamp", "a number in [0, 1e+12], got -1"),
    (_row(1e12 + 1, 10, 1), "timestamp", "a number in [0, 1e+12], got 1000000000001.0"),
    (_row(1, 2 ** 20 + 1, 1), "input_length", "a number in [1, 1.04858e+06], got 1048577"),
    (_row(1, 10, 0), "output_length", "a number in [1, 1.04858e+06], got 0"),
    (_row(1, True, 1), "input_length", "a number in [1, 1.04858e+06], got True"),
    (_row(1, 10.5, 1), "input_length", "a whole number of tokens, got 10.5"),
    (_row(1, 10, math.inf), "output_length", "a number in [1, 1.04858e+06], got inf"),
    ('{"timestamp": 1, "input_length": 10}', "output_length", "a number in [1, 1.04858e+06], got None"),
    ("[1, 2, 3]", "", "a JSON object with timestamp, input_length, output_length"),
    ("[" * 100000, "", "one flat JSON object per line (nested too deeply to read)")])
def test_a_bad_trace_line_is_refused_naming_the_file_line_and_key(tmp_path, line, key, expected):
    p = _trace(tmp_path, _row(0, 5, 5), line)
    e = _refused(lambda: tr.read_trace(p))
    assert (e.file, e.key, e.expected) == (f"{p}:2", key, expected)


def test_a_line_that_is_not_json_is_refused_naming_the_line(tmp_path):
    p = _trace(tmp_path, _row(0, 5, 5), "{not json")
    e = _refused(lambda: tr.read_trace(p))
    assert (e.file, e.key) == (f"{p}:2", "") and e.expected.startswith("one JSON object per line (Expecting")


def test_a_trace_whole_files_refusals(tmp_path):
    empty = _trace(tmp_path, "", name="e.jsonl")
    e = _refused(lambda: tr.read_trace(empty))
    assert (e.file, e.key, e.expected) == (str(empty), "",
                                           "at least one request line (timestamp, input_length, output_length)")
    missing = tmp_path / "nope.jsonl"
    e = _refused(lambda: tr.read_trace(missing))
    assert (e.file, e.key, e.expected) == (None, "--trace",
                                           f"a readable JSONL file, got '{missing}' (No such file or directory)")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b'{"a\xff": 1}\n')
    e = _refused(lambda: tr.read_trace(binary))
    assert (e.file, e.key, e.expected) == (str(binary), "", "UTF-8 JSONL text (byte 3 is not UTF-8)")
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate(tr.MAX_TRACE_BYTES + (5 << 18))  # sparse: 65.25 MiB long, nothing written
    e = _refused(lambda: tr.read_trace(big))
    assert (e.file, e.key, e.expected) == (str(big), "", "a trace of at most 64 MiB, got 65 MiB")  # whole MiB


def test_a_trace_of_exactly_the_byte_limit_is_read(tmp_path):
    row = _row(0, 5, 5) + "\n"
    p = tmp_path / "edge.jsonl"
    p.write_text(row + " " * (tr.MAX_TRACE_BYTES - len(row)))
    assert p.stat().st_size == tr.MAX_TRACE_BYTES and len(tr.read_trace(p)) == 1


def test_a_trace_of_more_requests_than_the_limit_is_refused(tmp_path):
    row = _row(0, 5, 5) + "\n"
    p = tmp_path / "many.jsonl"
    p.write_text(row * tr.MAX_REQUESTS)
    assert len(tr.read_trace(p)) == 200000
    p.write_text(row * (tr.MAX_REQUESTS + 1))
    e = _refused(lambda: tr.read_trace(p))
    assert (e.file, e.key, e.expected) == (str(p), "", "at most 200,000 requests")


def test_write_trace_rounds_to_whole_ms_and_refuses_a_closed_loop(tmp_path):
    a = tr.Arrivals(np.array([0.0, 1.2344, 2.0006]), np.array([7, 8, 9]), np.array([1, 2, 3]), "three")
    p = tmp_path / "w.jsonl"
    tr.write_trace(a, p)
    assert p.read_text() == (_row(0, 7, 1) + "\n" + _row(1234, 8, 2) + "\n" + _row(2001, 9, 3) + "\n")
    closed = tr.generate(tr.Traffic(L100, L10, concurrency=1, requests=2))
    e = _refused(lambda: tr.write_trace(closed, p))
    assert (e.key, e.expected) == ("--concurrency", "a closed loop has no arrival times to write; use --rate")
