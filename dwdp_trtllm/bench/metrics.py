"""Benchmark metrics from the engine's RankResults (pure arithmetic, no torch).

Definitions (iterations with IterationRecord.warmup are excluded everywhere):
- window_s: wall time of the measurement window, from the earliest non-warm-up iteration start to the
  latest non-warm-up iteration end over all ranks (one shared perf_counter clock).
- tokens: sum of num_tokens over non-warm-up iterations of all ranks.
- tps_per_gpu: tokens / window_s / ranks. On CPU a "GPU" is a rank. When several ranks share one GPU
  (num_gpus < ranks) the division is still by the number of ranks (a per-rank rate), flagged by
  `ranks_share_gpu`; tps_per_device = tokens / window_s / num_gpus is what each physical device did.
- tps_per_gpu_busy: mean over ranks of the rank's measured tokens / its own busy span (first non-warm-up
  iteration start to the end of its last non-warm-up iteration that processed tokens): a rank's rate
  while it has work, which leaves out the tail where lightly loaded ranks have finished.
- iterations_per_s: non-warm-up iterations that processed tokens, per rank per second of the window
  (empty iterations a DEP rank runs only to join its peers' collectives are not counted).
- ttft_*_ms: first_token_s - (t0 + arrival_s) of every request none of whose chunks ran in a warm-up
  iteration (queueing + compute); p50/p90/p99 with linear interpolation (numpy default).
- layer_us[phase]: mean over (rank, non-warm-up iteration) of the phase's summed span durations in
  that iteration, divided by the layers the phase belongs to: attention by all layers (per attention
  layer); expert_gemm, all_to_all, sync_wait, prefetch_wait, copy by the MoE layers (per MoE layer);
  other (dense MLPs, router, shared experts, norms, embedding; DEP across ranks also its dispatch sort / gather and
  combine) by all layers. expert_gemm is the whole routed-expert op (sort, gather, GEMMs, SwiGLU, combine) where one
  rank runs it (DWDP, DEP on one rank), the local expert MLP between the all-to-alls for DEP across ranks.
  exposed_copy = prefetch_wait, hidden_copy = max(copy - prefetch_wait, 0), per MoE layer.
- iteration_ms[phase]: the same sums per iteration (no division by layers); iteration_ms["wall"]: mean
  wall time of a measured iteration that processed tokens.
- iteration_ms_median[phase | "wall"]: the median over the same iterations (one-time costs such as a kernel
  compiled inside a measured iteration move the mean, not the median: compare the two).
- memory: per-rank RankResult.memory_bytes and the maximum over ranks of each key.
- allocator_after_warmup (CUDA): per rank, torch caching-allocator cudaMalloc calls, retries (cache freed,
  device synchronised) and OOMs during the measured iterations; non-zero retries flag a distorted timing.
- ratio: tps_per_gpu, tps_per_gpu_busy and iterations_per_s DWDP/DEP; ttft_speedup_* = DEP/DWDP.
"""
from __future__ import annotations

import math

import numpy as np

from ..engine.records import PHASES, RankResult

MEMORY_KEYS = ("weights", "prefetch_slots", "activations", "peak_total")


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def measured_iterations(results: list[RankResult]):
    """(rank result, iteration) for every non-warm-up iteration."""
    return [(r, it) for r in results for it in r.iterations if not it.warmup]


def phase_ms(it) -> dict[str, float]:
    """One iteration's milliseconds: the summed span durations of each phase (PHASES) and "wall" (its end - start)."""
    d = dict.fromkeys(PHASES, 0.0)
    for phase, _layer, s, e in it.phases:
        if phase in d:
            d[phase] += (e - s) * 1e3
    d["wall"] = (it.t_end - it.t_start) * 1e3
    return d


#: phases that happen once per MoE layer (layer_us divides them by the MoE layers, the others by all layers)
MOE_PHASES = ("expert_gemm", "all_to_all", "sync_wait", "prefetch_wait", "copy")


def mode_metrics(results: list[RankResult], num_layers: int, num_gpus: int | None = None,
                 num_moe_layers: int | None = None) -> dict:
    """Metrics of one mode's run (one RankResult per rank); see the module doc.

    num_gpus: physical devices the ranks ran on (None: one per rank, as on CPU). num_moe_layers: the
    model's MoE layers (None: every layer is one).
    """
    if not results:
        raise ValueError("no rank results")
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    ranks = len(results)
    gpus = ranks if num_gpus is None else num_gpus
    if not 1 <= gpus <= ranks:
        raise ValueError(f"num_gpus must be in [1, {ranks} ranks], got {num_gpus}")
    measured = measured_iterations(results)
    tokens = sum(it.num_tokens for _, it in measured)
    total_tokens = sum(it.num_tokens for r in results for it in r.iterations)
    window = (max(it.t_end for _, it in measured) - min(it.t_start for _, it in measured)) if measured else 0.0
    busy_iters = sum(1 for _, it in measured if it.num_tokens > 0)
    busy_rates = []
    for r in results:
        its = [it for it in r.iterations if not it.warmup]
        busy = [it for it in its if it.num_tokens > 0]
        if busy:
            span = busy[-1].t_end - its[0].t_start
            busy_rates.append(sum(it.num_tokens for it in busy) / span if span > 0 else math.nan)
        else:
            busy_rates.append(0.0)  # a rank with nothing measured adds no throughput

    ttft: list[float] = []
    for r in results:
        warm_ids = {s.request_id for it in r.iterations if it.warmup for s in it.segments}
        for q in r.requests:
            if q.request_id not in warm_ids and q.request_id in r.first_token_s:
                ttft.append(r.first_token_s[q.request_id] - (r.t0 + q.arrival_s))
    unfinished = sum(1 for r in results for q in r.requests if q.request_id not in r.first_token_s)

    all_iter = [phase_ms(it) for _, it in measured]
    per_iter = [d for (_, it), d in zip(measured, all_iter) if it.num_tokens > 0]  # measured, with tokens
    sums = {p: sum(d[p] for d in all_iter) for p in PHASES}  # ms
    n_moe = num_layers if num_moe_layers is None else num_moe_layers
    n = len(measured)
    layer_us = {}
    for p in PHASES:
        per = n_moe if p in MOE_PHASES else num_layers
        layer_us[p] = sums[p] / (n * per) * 1e3 if n and per else math.nan
    layer_us["exposed_copy"] = layer_us["prefetch_wait"]
    layer_us["hidden_copy"] = max(layer_us["copy"] - layer_us["prefetch_wait"], 0.0) if n and n_moe else math.nan
    iteration_ms = {p: (sums[p] / n if n else math.nan) for p in PHASES}
    iteration_ms["wall"] = float(np.mean([d["wall"] for d in per_iter])) if per_iter else math.nan
    iteration_ms_median = {p: float(np.median([d[p] for d in per_iter])) if per_iter else math.nan
                           for p in (*PHASES, "wall")}

    devices = sorted({r.device for r in results})
    mem_ranks = {str(r.rank): dict(r.memory_bytes) for r in results}
    mem_max = {k: max((int(r.memory_bytes.get(k, 0)) for r in results), default=0) for k in MEMORY_KEYS}
    return {
        "ranks": ranks,
        "num_gpus": gpus,
        "devices": devices,
        "ranks_share_gpu": gpus < ranks,
        "requests": sum(len(r.requests) for r in results),
        "requests_measured": len(ttft),
        "requests_unfinished": unfinished,
        "tokens": tokens,
        "total_tokens": total_tokens,
        "iterations": len(measured),
        "busy_iterations": busy_iters,
        "window_s": window,
        "tps_per_gpu": tokens / window / ranks if window > 0 else math.nan,
        "tps_per_device": tokens / window / gpus if window > 0 else math.nan,
        "tps_per_gpu_busy": float(np.mean(busy_rates)),
        "iterations_per_s": busy_iters / window / ranks if window > 0 else math.nan,
        "ttft_p50_ms": _percentile(ttft, 50) * 1e3,
        "ttft_p90_ms": _percentile(ttft, 90) * 1e3,
        "ttft_p99_ms": _percentile(ttft, 99) * 1e3,
        "layer_us": layer_us,
        "iteration_ms": iteration_ms,
        "iteration_ms_median": iteration_ms_median,
        "memory_max_bytes": mem_max,
        "memory_bytes": mem_ranks,
        "copy_bytes": sum(r.copy_bytes for r in results),
        # CUDA: cudaMalloc calls / allocator retries / OOMs during measured iterations, per rank
        "allocator_after_warmup": {str(r.rank): dict(r.extra["allocator_after_warmup"]) for r in results
                                   if "allocator_after_warmup" in r.extra},
    }


def _div(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def ratios(dep: dict, dwdp: dict) -> dict:
    """DWDP/DEP throughput ratios and DEP/DWDP TTFT speedups of two mode_metrics dicts."""
    return {
        "tps_per_gpu": _div(dwdp["tps_per_gpu"], dep["tps_per_gpu"]),
        "tps_per_gpu_busy": _div(dwdp["tps_per_gpu_busy"], dep["tps_per_gpu_busy"]),
        "iterations_per_s": _div(dwdp["iterations_per_s"], dep["iterations_per_s"]),
        "ttft_speedup_p50": _div(dep["ttft_p50_ms"], dwdp["ttft_p50_ms"]),
        "ttft_speedup_p90": _div(dep["ttft_p90_ms"], dwdp["ttft_p90_ms"]),
        "ttft_speedup_p99": _div(dep["ttft_p99_ms"], dwdp["ttft_p99_ms"]),
    }


def compute_metrics(by_mode: dict[str, list[RankResult]], num_layers: int, num_gpus: int | None = None,
                    num_moe_layers: int | None = None, *, num_experts: int | None = None, target_LE=None) -> dict:
    """{"<mode>": mode_metrics, ..., "ratio": ratios(dep, dwdp) or {} when either mode is missing}.

    num_experts: also each mode's "expert_load" (bench/expert_load.py; target_LE: the routing_skew popularity the
    workload asked for, per MoE layer)."""
    out: dict = {mode: mode_metrics(res, num_layers, num_gpus, num_moe_layers) for mode, res in by_mode.items()}
    if num_experts is not None:
        from .expert_load import mode_expert_load
        for mode, res in by_mode.items():
            out[mode]["expert_load"] = mode_expert_load(res, mode, num_experts, num_moe_layers or num_layers, target_LE)
    out["ratio"] = ratios(out["dep"], out["dwdp"]) if "dep" in out and "dwdp" in out else {}
    return out


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def consistency(metrics: dict, expected_tokens: int) -> dict:
    """Cross-mode checks of one point: tokens processed, finished requests, ratios recomputed."""
    modes = [m for m in metrics if m != "ratio"]
    totals = {m: metrics[m]["total_tokens"] for m in modes}
    checks = {
        "expected_tokens": expected_tokens,
        "total_tokens": totals,
        "tokens_equal_across_modes": len(set(totals.values())) <= 1,
        "tokens_match_workload": all(t == expected_tokens for t in totals.values()),
        "all_requests_finished": all(metrics[m]["requests_unfinished"] == 0 for m in modes),
        # run.warmup_iters at or past a rank's iterations leaves nothing measured: every metric would read "-"
        "iterations_measured": all(metrics[m]["iterations"] > 0 for m in modes),
    }
    if metrics.get("ratio"):
        again = ratios(metrics["dep"], metrics["dwdp"])
        checks["ratio_matches"] = set(again) == set(metrics["ratio"]) and all(
            _close(again[k], metrics["ratio"][k]) for k in again)
    checks["ok"] = all(v for k, v in checks.items() if isinstance(v, bool))
    return checks
