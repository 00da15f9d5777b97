"""Expert load of a bench run: how routing split the routed rows over EP ranks, and what DEP paid for it.

Pure arithmetic on RankResults (no torch). Per mode, over measured (non-warm-up) iterations:
- rows_max_over_mean_per_layer[m]: the busiest EP rank's routed (token, expert) rows over the mean rank's, for MoE
  layer m, under DEP's expert placement (contiguous blocks, routing_skew.contiguous_placement with ep_size = ranks),
  from the run's routed counts of every rank summed (the whole run: the many-token limit). In DWDP nobody holds a
  block alone; the number says how the same routing would have loaded DEP's ranks (equal routing -> equal numbers).
- step_rows_max_over_mean_per_layer[m]: the same per lock-step iteration (iteration i of every rank together, as
  DEP's all-to-all joins them), mean over iterations: what one DEP layer sees; finite batches add sampling noise.
- expert_wait_us_per_layer[m] (DEP): the time a DEP rank idles at MoE layer m because a peer's expert GEMM takes
  longer: per lock-step iteration, max over ranks of the expert_gemm span minus the rank's own, mean over ranks and
  iterations. It surfaces in the combine all-to-all (the next collective), so all_to_all time includes it.
- sync_wait_us_per_layer[m] (DEP): the measured wait at the layer's first collective (token / attention imbalance).
- prefetch_wait_us_per_layer[m] (DWDP): the exposed copy wait, the only wait a DWDP rank has.
- expert_gemm_us_per_layer[m]: mean expert_gemm span per (rank, iteration).
- target_max_over_mean_per_layer[m]: what the workload's routing_skew spec predicts (routing_skew module), if given.
Every *_per_layer list has one value per MoE layer; the un-suffixed key is its mean over layers.
"""
from __future__ import annotations

import math

import numpy as np

from ..engine.records import RankResult
from ..spec.routing_skew import contiguous_placement, counts_per_rank, max_over_mean


def _mean(xs) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return float(np.mean(xs)) if xs else math.nan


def _span_us(it, phase: str, num_moe: int) -> np.ndarray:
    out = np.zeros(num_moe)
    for p, layer, s, e in it.phases:
        if p == phase and 0 <= layer < num_moe:
            out[layer] += (e - s) * 1e6
    return out


def mode_expert_load(results: list[RankResult], mode: str, num_experts: int, num_moe_layers: int,
                     target_LE: np.ndarray | None = None) -> dict:
    """The expert-load statistics of one mode's run (module doc); NaN where nothing was recorded."""
    ranks = len(results)
    ep = min(ranks, num_experts)
    placement = contiguous_placement(num_experts, ep)
    total_ME = np.zeros((num_moe_layers, num_experts))
    by_index: dict[int, list] = {}
    for r in results:
        for it in r.iterations:
            if it.warmup or it.expert_counts is None:
                continue
            total_ME += np.asarray(it.expert_counts, dtype=np.float64)
            by_index.setdefault(it.iteration, []).append(it)
    pooled = [max_over_mean(counts_per_rank(total_ME[m], placement)) if total_ME[m].sum() > 0 else math.nan
              for m in range(num_moe_layers)]
    step = np.full(num_moe_layers, math.nan)
    wait = np.full(num_moe_layers, math.nan)
    if mode == "dep":
        aligned = [its for its in by_index.values() if len(its) == ranks]  # lock-step: iteration i on every rank
        if aligned:
            step_m = []
            for its in aligned:
                c_ME = sum(np.asarray(it.expert_counts, dtype=np.float64) for it in its)
                step_m.append([max_over_mean(counts_per_rank(c_ME[m], placement)) if c_ME[m].sum() > 0 else math.nan
                               for m in range(num_moe_layers)])
            step = np.array([_mean(col) for col in zip(*step_m)])
            gemm_IRM = np.array([[_span_us(it, "expert_gemm", num_moe_layers) for it in its] for its in aligned])
            wait = (gemm_IRM.max(1, keepdims=True) - gemm_IRM).mean((0, 1))
    measured = [it for r in results for it in r.iterations if not it.warmup]

    def per_layer(phase: str) -> list[float]:
        if not measured:
            return [math.nan] * num_moe_layers
        return (sum(_span_us(it, phase, num_moe_layers) for it in measured) / len(measured)).tolist()

    out = {
        "ep_size": ep,
        "rows_max_over_mean_per_layer": [float(x) for x in pooled],
        "step_rows_max_over_mean_per_layer": step.tolist(),
        "expert_gemm_us_per_layer": per_layer("expert_gemm"),
    }
    if mode == "dep":
        out["expert_wait_us_per_layer"] = wait.tolist()
        out["sync_wait_us_per_layer"] = per_layer("sync_wait")
    if mode == "dwdp":
        out["prefetch_wait_us_per_layer"] = per_layer("prefetch_wait")
    if target_LE is not None:
        from ..spec.routing_skew import expected_max_over_mean
        out["target_max_over_mean_per_layer"] = [expected_max_over_mean(p, ep) for p in target_LE]
    for key in [k for k in out if k.endswith("_per_layer")]:
        out[key[: -len("_per_layer")]] = _mean(out[key])
    return out


def _fmt(v, digits: int) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def expert_load_table(run: dict):
    """Per-MoE-layer table of a run whose workload has a routing skew (None otherwise): target and measured
    busiest-rank rows / mean, DEP's expert and sync waits, DWDP's expert GEMM and prefetch wait, us per layer."""
    from rich.table import Table
    skew = ((run.get("config") or {}).get("workload") or {}).get("routing_skew") or {}
    m = run.get("metrics", {})
    dep, dwdp = (m.get(k, {}).get("expert_load") for k in ("dep", "dwdp"))
    if skew.get("kind", "none") == "none" or not (dep or dwdp):
        return None
    ms = 1e-3  # the table shows ms per MoE layer (the JSON keeps us)
    cols = [("target x", dep or dwdp, "target_max_over_mean_per_layer", 2, 1.0),
            ("run x", dep or dwdp, "rows_max_over_mean_per_layer", 2, 1.0),
            ("step x", dep, "step_rows_max_over_mean_per_layer", 2, 1.0),
            ("DEP wait", dep, "expert_wait_us_per_layer", 2, ms),
            ("DEP sync", dep, "sync_wait_us_per_layer", 2, ms),
            ("DEP GEMM", dep, "expert_gemm_us_per_layer", 2, ms),
            ("DWDP GEMM", dwdp, "expert_gemm_us_per_layer", 2, ms),
            ("DWDP pf wait", dwdp, "prefetch_wait_us_per_layer", 2, ms)]
    cols = [c for c in cols if c[1] and c[2] in c[1]]
    label = ", ".join(f"{k}={v}" for k, v in skew.items() if v not in ("", None))
    table = Table(title=f"expert load per MoE layer (routing_skew: {label})", title_justify="left",
                  caption="x: the busiest EP rank's routed rows / the mean rank's under DEP's contiguous expert blocks "
                          "(EP = ranks): target (routing_skew), run (whole run), step (per DEP lock-step iteration). "
                          "ms per MoE layer: DEP wait = a rank idle for the slowest rank's expert GEMM (inside the "
                          "combine all-to-all), DEP sync = wait at the layer's first collective, GEMM = expert GEMM, "
                          "DWDP pf wait = exposed prefetch; DWDP ranks never wait for each other",
                  caption_justify="left")
    table.add_column("layer", justify="right")
    for title, *_ in cols:
        table.add_column(title, justify="right")
    n = max(len(c[1][c[2]]) for c in cols)
    for i in range(n):
        cells = []
        for _, src, key, digits, scale in cols:
            v = src[key][i] if i < len(src[key]) else None
            cells.append(_fmt(None if v is None else v * scale, digits))
        table.add_row(str(i), *cells)
    return table


def expert_load_rows() -> list[tuple[str, str, int]]:
    """(label, metric path under a mode's metrics, digits): the bench table's expert-load rows (bench/report.py)."""
    return [("busiest EP rank rows / mean, run (MoE-layer mean)", "expert_load.rows_max_over_mean", 2),
            ("  per lock-step iteration (DEP)", "expert_load.step_rows_max_over_mean", 2),
            ("  target of routing_skew", "expert_load.target_max_over_mean", 2),
            ("expert wait us per MoE layer (DEP: slowest rank's GEMM)", "expert_load.expert_wait_us", 1)]
