"""The floor under sustained load: the floor's kernels replayed back to back the way the engine runs its forwards.

The burst floor (bench/floor.py) times each kernel alone, a few calls at a time on an otherwise idle GPU: it runs at
the card's boost clock. The engine's forwards run back to back for seconds and, with FP8 at DeepSeek width, at the
card's power limit, where the SM clock is lower (docs/history/benchmarks-2026-12.md section 12: 1980 against 1552 MHz median on the
H200). Engine / burst floor therefore mixes what the engine adds with what the clock takes away. This module times
the same kernels (FloorTimer's closures, the attention core in the way the burst floor found fastest) as one
sequence: every measured iteration's batch in order, each in the engine's layer order (attention; dense MLP or
router + shared experts + routed grouped GEMMs), repeated:
1. warm-up: passes until at least `warmup_s` have gone by and the pass time has settled (the median of the last
   `window` passes within `rel_tol` of the `window` before: `tail_steady`), or `MAX_WARMUP_FACTOR` x warmup_s at most
   (then `warmup_end` says "cap", not "steady");
2. timed: `timed_passes` passes, enough to run as long as the engine's measured iterations ran (measure_s), at least
   `min_timed`, at most `max_timed`; each piece timed with CUDA events between its kernels (no sync inside a pass).
Per iteration and phase the median over the timed passes; the floor is their mean over iterations, as the burst
floor's. Engine / sustained floor (floor.over_floor) then compares the engine with its own kernels at a like clock.
Every rank's iterations are replayed on cuda:0, one after another: `dwdp bench --floor-sustained` refuses more than
MAX_RANKS ranks (check_ranks). Pure parts (tail_steady, warmup_done, timed_passes, measured_window, check_warmup_s,
check_ranks) are CPU-tested; torch is imported only where a pass runs.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

#: the warm-up ends at this multiple of warmup_s even if the pass time never settles
MAX_WARMUP_FACTOR = 4.0
#: --floor-warmup-s accepted range, seconds
WARMUP_S_RANGE = (0.5, 60.0)
#: --floor-sustained is refused above this many ranks: every rank's measured iterations are replayed back to back on
#: cuda:0 (at least min_timed passes after the warm-up), so a pass takes about ranks x the engine's measured span
MAX_RANKS = 2
PHASES = ("attention", "expert_gemm", "other")


@dataclass(frozen=True)
class SustainedSettings:
    """How the sustained floor is timed (module docstring)."""

    warmup_s: float = 3.0
    window: int = 3
    rel_tol: float = 0.02
    min_timed: int = 5
    max_timed: int = 60


def check_warmup_s(value) -> float:
    """--floor-warmup-s as given: a number of seconds in WARMUP_S_RANGE, else ConfigError naming the flag (exit 2)."""
    from ..spec.schema import ConfigError

    lo, hi = WARMUP_S_RANGE
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ConfigError(None, "--floor-warmup-s", f"expected seconds in [{lo:g}, {hi:g}], got {value!r}")
    return v


def check_ranks(points) -> None:
    """--floor-sustained on sweep points (SweepPoint: .config.run.ranks): ConfigError naming the flag (exit 2) for
    a point of more than MAX_RANKS ranks (why: MAX_RANKS), before any rank starts."""
    from ..spec.schema import ConfigError

    many = sorted({p.config.run.ranks for p in points if p.config.run.ranks > MAX_RANKS})
    if many:
        raise ConfigError(None, "--floor-sustained", f"takes at most {MAX_RANKS} ranks (run.ranks), got "
                          f"{', '.join(map(str, many))}: it replays every rank's measured iterations back to back on "
                          f"cuda:0, at least {SustainedSettings.min_timed} passes, each about ranks x the engine's "
                          "measured span; run it with fewer ranks")


def tail_steady(pass_ms: list[float], window: int, rel_tol: float) -> bool:
    """The replays have settled: the median of the last `window` pass times is within rel_tol (relative) of the
    median of the `window` before them. False with fewer than 2 x window passes."""
    if window < 1 or len(pass_ms) < 2 * window:
        return False
    last, before = statistics.median(pass_ms[-window:]), statistics.median(pass_ms[-2 * window:-window])
    return before > 0 and abs(last - before) <= rel_tol * before


def warmup_done(elapsed_s: float, pass_ms: list[float], st: SustainedSettings) -> str | None:
    """"steady" once warmup_s has gone by and tail_steady holds, "cap" at MAX_WARMUP_FACTOR x warmup_s whatever the
    passes do, else None (go on)."""
    if elapsed_s >= st.warmup_s and tail_steady(pass_ms, st.window, st.rel_tol):
        return "steady"
    if elapsed_s >= MAX_WARMUP_FACTOR * st.warmup_s:
        return "cap"
    return None


def timed_passes(pass_ms: float, measure_s: float | None, st: SustainedSettings) -> int:
    """How many passes to time: enough to run measure_s (the engine's measured span) at pass_ms a pass, within
    [min_timed, max_timed]; min_timed without a span."""
    if not measure_s or measure_s <= 0 or pass_ms <= 0:
        return st.min_timed
    return max(st.min_timed, min(st.max_timed, math.ceil(measure_s * 1e3 / pass_ms)))


def measured_window(results) -> tuple[float, float] | None:
    """(first start, last end) on perf_counter of the measured iterations that processed tokens, over every rank
    of one mode (RankResults); None when there are none."""
    its = [it for r in results for it in r.iterations if not it.warmup and it.num_tokens > 0]
    if not its:
        return None
    return min(it.t_start for it in its), max(it.t_end for it in its)


def iteration_pieces(timer, batch) -> list[tuple[str, list]]:
    """One iteration's kernels as the engine runs them, layer by layer: [(phase, [closure, ...])], consecutive
    pieces of one phase merged. The closures are FloorTimer's (the burst floor's kernels); the attention core in the
    way the burst floor found fastest for this batch."""
    sp = timer.spec
    segs = batch.segments
    T, S = batch.tokens, sum(p + n for p, n in segs)
    attention = [timer.op_fn(*g) for g in timer.attention_proj_gemms(T, S)]
    attention += [timer.attention_passes_fn(T, S), timer.attention_core_fn(segs)]
    dense = [timer.op_fn(*g) for g in timer.dense_mlp_gemms(T)]
    moe_other = [timer.op_fn(*g) for g in timer.moe_other_gemms(T)]
    out: list[tuple[str, list]] = []

    def add(phase: str, fns: list) -> None:
        fns = [f for f in fns if f is not None]
        if not fns:
            return
        if out and out[-1][0] == phase:
            out[-1][1].extend(fns)
        else:
            out.append((phase, list(fns)))
    for layer in range(sp.num_layers):
        add("attention", attention)
        if layer < sp.first_k_dense:
            add("other", dense)
        else:
            add("other", moe_other)
            add("expert_gemm", [timer.grouped_fn(batch.rows_per_expert[layer - sp.first_k_dense])])
    return out


def _run_pass(iters: list[list[tuple[str, list]]], cuda: bool) -> list[dict[str, float]]:
    """Every iteration's pieces once, back to back; {phase: ms} per iteration (CUDA events between pieces, one
    synchronisation at the end; perf_counter on the CPU)."""
    import torch  # here: runner.py imports this module's pure parts without torch

    def mark():
        if not cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    marks = []
    prev = mark()
    for i, pieces in enumerate(iters):
        for phase, fns in pieces:
            for fn in fns:
                fn()
            now = mark()
            marks.append((i, phase, prev, now))
            prev = now
    if cuda:
        torch.cuda.synchronize()
    out = [dict.fromkeys(PHASES, 0.0) for _ in iters]
    for i, phase, a, b in marks:
        out[i][phase] += a.elapsed_time(b) if cuda else (b - a) * 1e3
    return out


def sustained_floor(timer, batches: list, measure_s: float | None, st: SustainedSettings) -> dict:
    """The floor of `batches` (one mode's measured iterations, in order) under sustained load (module docstring):
    {"floor_ms": {attention, expert_gemm, other, total}: mean over iterations of the median over timed passes,
    "passes_timed", "pass_ms": the timed passes' ms, "warmup_passes", "warmup_s", "warmup_end": "steady" | "cap",
    "window": (t0, t1) of the timed passes on perf_counter (for the clock samples)}."""
    cuda = timer.device.type == "cuda"
    iters = [iteration_pieces(timer, b) for b in batches]
    total = lambda p: sum(sum(d.values()) for d in p)  # noqa: E731 - one pass's ms
    warm: list[float] = []
    t_start = time.perf_counter()
    while True:
        warm.append(total(_run_pass(iters, cuda)))
        end = warmup_done(time.perf_counter() - t_start, warm, st)
        if end:
            break
    warmup_s = time.perf_counter() - t_start
    n = timed_passes(statistics.median(warm[-st.window:]), measure_s, st)
    t0 = time.perf_counter()
    passes = [_run_pass(iters, cuda) for _ in range(n)]
    t1 = time.perf_counter()
    per_iter = []
    for i in range(len(iters)):
        d = {ph: statistics.median(p[i][ph] for p in passes) for ph in PHASES}
        d["total"] = statistics.median(sum(p[i].values()) for p in passes)
        per_iter.append(d)
    floor = {k: statistics.fmean(d[k] for d in per_iter) for k in (*PHASES, "total")}
    return {"floor_ms": floor, "passes_timed": n, "pass_ms": [total(p) for p in passes], "warmup_passes": len(warm),
            "warmup_s": warmup_s, "warmup_end": end, "window": (t0, t1)}


def summary(run: dict, mode: str = "dep") -> dict:
    """The numbers a reader compares, read (not recomputed) from one results.json run with a sustained floor: ms per
    iteration of the burst floor, the sustained floor and the engine (mean over measured iterations), engine / each
    floor (floor.over_floor, as written), and the SM clock (MHz) and power (W) medians of each (gpu_clocks.clock_stats,
    as written). Missing entries are None."""
    f = (run.get("floor") or {}).get(mode) or {}
    su, clock = f.get("sustained") or {}, f.get("clock") or {}

    def med(key: str, what: str):
        return ((clock.get(key) or {}).get(what) or {}).get("median")
    out = {"point": run.get("point"), "isl": ((run.get("config") or {}).get("workload") or {}).get("isl"),
           # the point's ISL from its config: a point set with --set has no swept values ("point": {})
           "mode": mode, "device": (run.get("floor") or {}).get("device"),
           "unit": "ms per iteration; MHz; W",
           "engine_ms": f.get("measured_ms", {}).get("total"),
           "floor_burst_ms": f.get("floor_ms", {}).get("total"),
           "floor_sustained_ms": (su.get("floor_ms") or {}).get("total"),
           "engine_over_floor_burst": (f.get("measured_over_floor") or {}).get("total"),
           "engine_over_floor_sustained": (su.get("measured_over_floor") or {}).get("total"),
           "phases_over_floor_sustained": su.get("measured_over_floor"),
           "passes_timed": su.get("passes_timed"), "warmup_s": su.get("warmup_s"), "warmup_end": su.get("warmup_end")}
    for key in ("floor_burst", "floor_sustained", "engine"):
        out[f"{key}_sm_clock_mhz"] = med(key, "sm_clock_mhz")
        out[f"{key}_power_w"] = med(key, "power_w")
    return out


if __name__ == "__main__":  # python3 -m dwdp_trtllm.bench.floor_sustained RESULTS.json: one summary line per run
    import json
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m dwdp_trtllm.bench.floor_sustained RESULTS.json")
    for r in json.loads(open(sys.argv[1]).read())["runs"]:
        print(json.dumps(summary(r)))
