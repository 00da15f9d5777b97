"""What a simulated deployment delivers, and whether it meets the SLOs (pure). Every number `dwdp size` shows about
a run is computed here, once.

- TTFT: arrival -> first token (the context server's last chunk); p50 / p99 over every request.
- TPOT: (finish - first token) / (OSL - 1) per request (KV transfer and generation queueing included); TPS/user
  is its inverse; both the median over requests with OSL > 1.
- output TPS/GPU: output tokens produced inside the traffic's window (from 0 to the last arrival; each request's
  tokens spread evenly between its first token and its finish) / window / the deployment's GPUs.
- goodput: requests/s (inside the window) whose own TTFT is within the p99 TTFT SLO and whose own TPS/user is at
  least the TPS/user SLO (per-request attainment, as DistServe defines goodput).
- SLOs met: TTFT p50 and p99 within theirs and the median TPS/user at least its target.
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

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in asdict(self).items()}


def summarize(r: SimResult, gpus: int, slo: Slo) -> Metrics:
    """The Metrics of one run (module docstring)."""
    ttft = r.first_token_s - r.arrival_s
    ok = ~np.isnan(r.done_s)
    gen = ok & (r.osl > 1)
    tpot = np.where(gen, (r.done_s - r.first_token_s) / np.maximum(r.osl - 1, 1), np.nan)
    tpot_med = float(np.nanmedian(tpot)) if gen.any() else float("nan")
    w = r.window_s
    span = np.maximum(r.done_s - r.first_token_s, 1e-12)
    frac = np.clip((w - r.first_token_s) / span, 0.0, 1.0)
    out = np.where(ok, 1.0 * (r.first_token_s <= w) + (r.osl - 1) * np.where(r.first_token_s <= w, frac, 0.0), 0.0)
    good = ok & (r.arrival_s <= w)
    if slo.ttft_p99_s is not None:
        good &= ttft <= slo.ttft_p99_s
    if slo.tps_user is not None:
        good &= np.where(gen, 1.0 / np.maximum(tpot, 1e-12) >= slo.tps_user, True)
    q = np.nanpercentile(ttft, [50, 99]) if np.isfinite(ttft).any() else [math.inf, math.inf]
    return Metrics(ttft_p50_s=float(q[0]), ttft_p99_s=float(q[1]), tpot_s=tpot_med,
                   tps_user=1.0 / tpot_med if tpot_med > 0 else float("nan"),
                   output_tps_per_gpu=float(out.sum()) / w / gpus, goodput_rps=float(good.sum()) / w,
                   requests=int(r.arrival_s.size), completed=int(ok.sum()))


def meets(m: Metrics, slo: Slo) -> bool:
    """The SLOs met by the run's distribution (module docstring)."""
    return ((slo.ttft_p50_s is None or m.ttft_p50_s <= slo.ttft_p50_s)
            and (slo.ttft_p99_s is None or m.ttft_p99_s <= slo.ttft_p99_s)
            and (slo.tps_user is None or (math.isfinite(m.tps_user) and m.tps_user >= slo.tps_user))
            and m.completed == m.requests)
