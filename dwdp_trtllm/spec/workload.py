"""Benchmark workload: each rank's queue of context requests, deterministic from WorkloadConfig.seed.

Construction (pure, numpy Generator):
- per-rank imbalance: rank r's mean ISL is isl * f_r with f_r = 1 + imbalance_cv * z_r, where z is an
  evenly spaced sequence normalised to mean 0 and (population) standard deviation 1 for exactly this
  number of ranks, so the factors' coefficient of variation (population std / mean) is imbalance_cv
  exactly (rank 0 lightest, last rank heaviest); factors are clipped to >= 0.1, which only changes the
  CV for very large imbalance_cv with many ranks.
- per-request ISL around the rank's scale m_r = isl * f_r:
    fixed:          round(m_r)
    uniform_ratio:  integer uniform in [ceil(isl_ratio * m_r), round(m_r)] (the paper's "ratio 0.8")
    normal:         round(N(m_r, (isl_cv * m_r)^2)), clipped to >= 1
- arrival: offline (every request at t = 0) or poisson (cumulative exponential gaps of mean 1/rate).
Each rank draws from its own child of SeedSequence(seed), so rank r's draws do not depend on how many
ranks there are (only its factor does).
"""
from __future__ import annotations

import math

import numpy as np

from .config import WorkloadConfig
from .batching import Request

MIN_FACTOR = 0.1


def imbalance_factors(imbalance_cv: float, ranks: int) -> np.ndarray:
    """Per-rank ISL scale factors with mean 1 and coefficient of variation imbalance_cv (see module doc)."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if imbalance_cv < 0:
        raise ValueError(f"imbalance_cv must be >= 0, got {imbalance_cv}")
    if ranks == 1 or imbalance_cv == 0:
        return np.ones(ranks)
    z = np.linspace(-1.0, 1.0, ranks)
    z = (z - z.mean()) / z.std()
    return np.maximum(1.0 + imbalance_cv * z, MIN_FACTOR)


def _isls(w: WorkloadConfig, scale: float, n: int, rng: np.random.Generator) -> np.ndarray:
    hi = max(1, round(scale))
    if w.isl_dist == "fixed":
        return np.full(n, hi, dtype=np.int64)
    if w.isl_dist == "uniform_ratio":
        lo = min(hi, max(1, math.ceil(w.isl_ratio * scale)))
        return rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64)
    if w.isl_dist == "normal":
        return np.maximum(np.rint(rng.normal(scale, w.isl_cv * scale, size=n)), 1).astype(np.int64)
    raise ValueError(f"isl_dist: unknown distribution {w.isl_dist!r}")


def _arrivals(w: WorkloadConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    if w.arrival == "offline":
        return np.zeros(n)
    if w.arrival == "poisson":
        return np.cumsum(rng.exponential(1.0 / w.rate, size=n))
    raise ValueError(f"arrival: unknown arrival process {w.arrival!r}")


def generate_requests(w: WorkloadConfig, ranks: int) -> list[list[Request]]:
    """One FCFS queue per rank; request ids are unique across ranks (rank * num_requests + i)."""
    factors = imbalance_factors(w.imbalance_cv, ranks)
    seeds = np.random.SeedSequence(w.seed).spawn(ranks)
    n = w.num_requests
    queues = []
    for r in range(ranks):
        rng = np.random.default_rng(seeds[r])
        isls = _isls(w, w.isl * float(factors[r]), n, rng)
        arrivals = _arrivals(w, n, rng)
        queues.append([Request(request_id=r * n + i, rank=r, isl=int(isls[i]), arrival_s=float(arrivals[i]))
                       for i in range(n)])
    return queues


def describe(queues: list[list[Request]]) -> dict:
    """Summary of generated queues: per-rank request count, tokens and mean ISL; CV of the rank means."""
    means = np.array([np.mean([q.isl for q in rq]) if rq else 0.0 for rq in queues])
    cv = float(means.std() / means.mean()) if means.size and means.mean() > 0 else 0.0
    return {"requests": [len(rq) for rq in queues], "tokens": [int(sum(q.isl for q in rq)) for rq in queues],
            "mean_isl": [float(m) for m in means], "rank_mean_cv": cv}
