"""What a simulated deployment delivers, and whether it meets the SLOs (pure). Every number `dwdp size` shows about
a run is computed here, once.

- TTFT: arrival -> first token (the context server's last chunk); p50 / p99 over every request.
- TPOT: (finish - first token) / (OSL - 1) per request (KV transfer and generation queueing included); TPS/user
  is its inverse; both the median over requests with OSL > 1.
- output TPS/GPU: a steady-state rate: output tokens produced inside the steady window (each request's tokens
  spread evenly between its first token and its finish) / the window's length / the deployment's GPUs. The window
  ends where the offered traffic ends: an open loop's last arrival; a closed loop's last send (its prompt cap or
  duration: after it the users drain one by one, the deployment runs below the loop's load, and counting that
  tail would under-count the steady rate); it starts after a warm-up of one median request lifetime (arrival to
  finish: the time an empty deployment takes to fill), at most half the window's end (`tps_window`, stated in
  the output).
- offered: requests/s arriving inside the traffic's window (from 0 to its end: the stated span, e.g. --duration,
  when longer than the last arrival, so a short run does not count n requests over n - 1 gaps).
- goodput: requests/s arriving inside the same window whose own TTFT is within the p99 TTFT SLO and whose own
  TPS/user is at least the TPS/user SLO (per-request attainment, as DistServe defines goodput): never above
  offered.
- SLOs met: TTFT p50 and p99 within theirs and the median TPS/user at least its target.
- a range [low-high] of a metric: the nominal and the planner's two ends (perf/uncertainty.py); the two ends need
  not bracket the nominal (a queue is not monotonic in its inputs), so the range is the hull of all three
  (`metric_range`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..spec.schema import ConfigError
from .simulator import SimResult


@dataclass(frozen=True)
class Slo:
    """Targets: TTFT p50 / p99 (s) and tokens/s per user (None: no target)."""

    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    tps_user: float | None = None

    def check(self) -> None:
        for arg, v, hi in (("--ttft-p50", self.ttft_p50_s, 3600.0), ("--ttft-p99", self.ttft_p99_s, 3600.0),
                           ("--tps-user", self.tps_user, 1e5)):
            if v is not None and not (math.isfinite(v) and 0 < v <= hi):
                raise ConfigError(None, arg, f"expected a number in (0, {hi:g}], got {v}")
        if self.ttft_p50_s and self.ttft_p99_s and self.ttft_p50_s > self.ttft_p99_s:
            raise ConfigError(None, "--ttft-p50", f"expected at most --ttft-p99 ({self.ttft_p99_s:g} s), "
                                                  f"got {self.ttft_p50_s:g} s")


@dataclass(frozen=True)
class Metrics:
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_s: float
    tps_user: float
    output_tps_per_gpu: float
    goodput_rps: float
    requests: int
    completed: int
    offered_rps: float = math.nan
    tps_window: tuple[float, float] = (0.0, 0.0)  # (start, end) s of the steady window output TPS/GPU counts

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else
                    list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def steady_window(r: SimResult) -> tuple[float, float]:
    """(start, end) s of the window output TPS/GPU counts (module docstring)."""
    end = float(r.window_s) if math.isnan(r.steady_end_s) else float(r.steady_end_s)
    ok = ~np.isnan(r.done_s)
    life = float(np.median(r.done_s[ok] - r.arrival_s[ok])) if ok.any() else 0.0
    return min(max(life, 0.0), end / 2), end


def tokens_between(r: SimResult, a: float, b: float) -> float:
    """Output tokens the run produced in [a, b]: each finished request's first token at its first-token time, the
    rest spread evenly up to its finish."""
    ok = ~np.isnan(r.done_s)
    first = np.where(ok, (r.first_token_s >= a) & (r.first_token_s <= b), False)
    span = np.maximum(r.done_s - r.first_token_s, 1e-12)
    lo = np.clip((a - r.first_token_s) / span, 0.0, 1.0)
    hi = np.clip((b - r.first_token_s) / span, 0.0, 1.0)
    rest = np.where(ok, (r.osl - 1) * (hi - lo), 0.0)
    return float(first.sum() + rest.sum())


def metric_range(m: Metrics, lo: Metrics | None, hi: Metrics | None, key: str) -> tuple[float, float]:
    """(low, high) of metric `key` over the nominal run and the range's two ends: always contains the nominal."""
    vals = [getattr(x, key) for x in (m, lo, hi) if x is not None]
    vals = [v for v in vals if math.isfinite(v)] or [getattr(m, key)]
    return min(vals), max(vals)


def summarize(r: SimResult, gpus: int, slo: Slo, span_s: float | None = None) -> Metrics:
    """The Metrics of one run (module docstring); span_s: the offered traffic's stated span (None: the run's)."""
    ttft = r.first_token_s - r.arrival_s
    ok = ~np.isnan(r.done_s)
    gen = ok & (r.osl > 1)
    tpot = np.where(gen, (r.done_s - r.first_token_s) / np.maximum(r.osl - 1, 1), np.nan)
    tpot_med = float(np.nanmedian(tpot)) if gen.any() else float("nan")
    w = max(float(r.window_s), float(span_s or 0.0))
    inside = r.arrival_s <= w
    good = ok & inside
    if slo.ttft_p99_s is not None:
        good &= ttft <= slo.ttft_p99_s
    if slo.tps_user is not None:
        good &= np.where(gen, 1.0 / np.maximum(tpot, 1e-12) >= slo.tps_user, True)
    q = np.nanpercentile(ttft, [50, 99]) if np.isfinite(ttft).any() else [math.inf, math.inf]
    a, b = steady_window(r)
    return Metrics(ttft_p50_s=float(q[0]), ttft_p99_s=float(q[1]), tpot_s=tpot_med,
                   tps_user=1.0 / tpot_med if tpot_med > 0 else float("nan"),
                   output_tps_per_gpu=tokens_between(r, a, b) / max(b - a, 1e-9) / gpus,
                   goodput_rps=float(good.sum()) / w, requests=int(r.arrival_s.size), completed=int(ok.sum()),
                   offered_rps=float(inside.sum()) / w, tps_window=(round(a, 3), round(b, 3)))


def meets(m: Metrics, slo: Slo) -> bool:
    """The SLOs met by the run's distribution (module docstring)."""
    return ((slo.ttft_p50_s is None or m.ttft_p50_s <= slo.ttft_p50_s)
            and (slo.ttft_p99_s is None or m.ttft_p99_s <= slo.ttft_p99_s)
            and (slo.tps_user is None or (math.isfinite(m.tps_user) and m.tps_user >= slo.tps_user))
            and m.completed == m.requests)
