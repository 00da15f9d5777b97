"""A point run several times (run.repeat): one report run with the spread of its rates, TTFTs and gains (pure).

The run kept as "metrics" is a real repeat, the one whose DWDP/DEP tokens/s gain is the median (the lower
median for an even count), so every number in it belongs to one measurement and its ratios stay consistent.
Beside it, "repeats" holds, for every mode and for the gains, the median, min, max and the values over the
repeats of the keys a reader compares (STAT_KEYS, every ratio key). Consistency: every repeat must pass.
"""
from __future__ import annotations

import math
import statistics

#: per-mode metrics summarised over repeats: the rates and the TTFT percentiles
STAT_KEYS = ("tps_per_gpu", "tps_per_gpu_busy", "tps_per_device", "iterations_per_s", "ttft_p50_ms", "ttft_p90_ms",
             "ttft_p99_ms")


def spread(values: list) -> dict | None:
    """{"median", "min", "max", "values"} of the finite values; None when there is none."""
    vals = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}


def _gain(run: dict) -> float:
    ratio = run["metrics"].get("ratio", {}).get("tps_per_gpu")
    if isinstance(ratio, (int, float)) and math.isfinite(ratio):
        return float(ratio)
    first = next((m for k, m in run["metrics"].items() if k != "ratio"), {})
    v = first.get("tps_per_gpu")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0


def merge_repeats(runs: list[dict]) -> dict:
    """One report run from the repeats of one point (a single run is returned unchanged)."""
    if not runs:
        raise ValueError("merge_repeats needs at least one run")
    if len(runs) == 1:
        return runs[0]
    order = sorted(range(len(runs)), key=lambda i: _gain(runs[i]))
    chosen = order[(len(runs) - 1) // 2]
    modes = [k for k in runs[chosen]["metrics"] if k != "ratio"]
    stats: dict = {mode: {k: spread([r["metrics"].get(mode, {}).get(k) for r in runs]) for k in STAT_KEYS}
                   for mode in modes}
    ratio_keys = sorted({k for r in runs for k in r["metrics"].get("ratio", {})})
    if ratio_keys:
        stats["ratio"] = {k: spread([r["metrics"].get("ratio", {}).get(k) for r in runs]) for k in ratio_keys}
    out = dict(runs[chosen])
    oks = [bool(r.get("consistency", {}).get("ok", True)) for r in runs]
    out["consistency"] = {**runs[chosen].get("consistency", {}), "ok": all(oks), "repeats_ok": oks}
    out["repeats"] = {"n": len(runs), "chosen": chosen, "stats": stats,
                      "method": "metrics: the repeat with the median DWDP/DEP tokens/s gain; stats: median, min, max "
                                "over the repeats (same requests each time)"}
    return out
