"""FloorPoints: what one mode of one `dwdp bench --floor` run says about the engine's compute (pure).

A floor run (a results.json run with "floor", bench/floor.py) gives, for each mode, over its measured
iterations (those that processed tokens): the FLOPs of every phase (floor_tflops x floor_ms, means), the
stock-kernel floor time (mean), the engine's measured time over the same iterations (the floor's measured_ms:
mean; metrics iteration_ms_median: median, when the bench wrote it) and the median over iterations of each
iteration's measured / floor (measured_over_floor_median, when written). One (run, mode) is one FloorPoint at
(tokens per iteration, ISL).

A measurement that does not describe the engine's work is marked, per statistic and phase ("mean.attention",
"median.wall", ...), with the reason; it then neither calibrates nor validates:
- runs whose ranks shared a GPU (time-slicing): every statistic of every timed phase and the wall, and the point
  is `shared_gpu`: it calibrates nothing, floor rates included (FloorCalibration.select leaves it out);
- allocator retries or OOMs in measured iterations (metrics.allocator_after_warmup): every phase;
- a mean above its own median by more than the iterations' work explains (x (1 + REPEAT_TOLERANCE)): one-time
  costs inside a measured iteration (a plan built, a kernel compiled);
- not repeatable: (run, mode)s of one campaign that did identical work for a phase (same FLOPs, same weight
  dtype for experts, same linear-layer dtype for attention and other) but measured it more than REPEAT_TOLERANCE apart (mark_unrepeatable): the ones above an
  agreeing core of two or more, or, when no two agree, that phase in the whole campaign;
- the wall, when a phase it contains is marked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .bench_work import floor_flops, get, rebuild, run_model

RATE_KEYS = ("attention_proj", "attention_core", "expert_gemm", "other")
ENGINE_PHASES = ("attention", "expert_gemm", "other")
TIMED_PHASES = ("attention", "expert_gemm", "other", "all_to_all", "sync_wait", "prefetch_wait")
STATS = ("mean", "median")  # of the measured iterations' times (_measured_stats)
#: identical work measured more than this apart (or a mean this far above what its median and the work explain):
#: the measurement carries costs other than the work
REPEAT_TOLERANCE = 0.10
#: rebuilt batches must reproduce the floor's FLOPs to this relative error to count as the same work
SAME_WORK = 1e-6


@dataclass(frozen=True)
class FloorPoint:
    """One mode of one floor run: per-iteration numbers over its measured iterations (per rank)."""

    source: str  # results file (resolved path)
    run: int  # index in the file's runs
    run_id: str  # point_hash@env.date: the same measurement in a copy of the file ('' unknown)
    mode: str
    campaign: str  # the directory of the file
    date: str  # env.date, '' when unknown
    weight_dtype: str
    num_layers: int
    tokens: float  # tokens per measured iteration
    expert_tokens: float  # tokens of a one-rank layer with the same routed rows per expert
    rows_per_expert: float  # routed rows per expert of the expert phase (mean over MoE layers and iterations)
    isl: float  # workload ISL
    calls: float | None  # attention segments per iteration, all layers (None: batches not rebuilt)
    flops: dict[str, float]  # per iteration (mean): RATE_KEYS
    floor_ms: dict[str, float]  # per iteration (mean): RATE_KEYS + attention
    measured: dict[str, dict[str, float]]  # stat -> ENGINE_PHASES + wall + timed (the sum of TIMED_PHASES)
    over_floor_median: dict[str, float] = field(default_factory=dict)  # ENGINE_PHASES: median of per-iteration ratios
    excluded: dict[str, str] = field(default_factory=dict)  # "stat.phase" -> why it neither calibrates nor validates
    shared_gpu: bool = False  # its ranks time-sliced a GPU: every statistic marked, and it calibrates nothing
    linear_dtype: str = "bf16"  # the dtype its linear layers (projections, dense MLP, shared experts) ran and were floored in

    @property
    def label(self) -> str:
        return f"{Path(self.source).name}{'' if self.run == 0 else f'[{self.run}]'} {self.mode}"

    def factor(self, phase: str) -> float | None:
        """The engine's measured / floor of `phase` (ENGINE_PHASES), or wall / timed phases for "outside":
        the median-based one when usable (robust to one-time costs), else the mean-based one; None when neither."""
        for stat in ("median", "mean"):
            f = self._factor(stat, phase)
            if f is not None:
                return f
        return None

    def _factor(self, stat: str, phase: str) -> float | None:
        if f"{stat}.{'wall' if phase == 'outside' else phase}" in self.excluded:
            return None
        m = self.measured.get(stat, {})
        if phase == "outside":
            num, den = m.get("wall"), m.get("timed")
        elif stat == "median":
            num, den = self.over_floor_median.get(phase), 1.0
        else:
            num, den = m.get(phase), self.floor_ms.get(phase)
        return num / den if num and den and num > 0 and den > 0 else None


def _pos(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def run_id(run: dict) -> str:
    """What identifies one measurement wherever its file was copied: the point's config hash and its date
    ('' when the run has no point_hash)."""
    return f"{run['point_hash']}@{get(run, 'env.date', '') or ''}" if run.get("point_hash") else ""


def points_from_bench(data: Any, *, file: str) -> tuple[list[FloorPoint], list[str]]:
    """FloorPoints of every (run, mode) with a floor in one results.json, and notes on what was skipped."""
    runs = data.get("runs") if isinstance(data, dict) else None
    if runs is None and isinstance(data, dict) and "floor" in data:
        runs = [data]
    if not isinstance(runs, list):
        return [], []
    path = Path(file).resolve()
    out, notes = [], []
    for i, r in enumerate(runs):
        if not isinstance(r, dict) or not isinstance(r.get("floor"), dict) or not isinstance(r.get("config"), dict):
            continue
        label = f"{path.name}{'' if i == 0 else f'[{i}]'}"
        try:
            spec = run_model(r["config"])
        except (ValueError, TypeError) as e:
            notes.append(f"{label}: model not rebuilt ({e}); not used")
            continue
        load, why = rebuild(r["config"], spec)
        for mode, f in r["floor"].items():
            if isinstance(f, dict) and isinstance(f.get("floor_ms"), dict):
                p = _point(r, i, mode, f, spec, load, str(path), notes, label)
                if p is not None:
                    out.append(p)
        if load is None:
            notes.append(f"{label}: batches not rebuilt ({why}); it does not fit the attention core's per-call cost")
    return out, notes


def _spread(spec, load) -> dict[str, float]:
    """mean / median over the rebuilt busy iterations of each phase's FLOPs (wall: all phases): how far the mean
    of a measurement may lie above its median from the work alone."""
    out = {}
    per_it = [floor_flops(spec, load.at(s)) for s in range(load.tokens_SR.shape[0]) if load.tokens_SR[s].sum() > 0]
    for ph, keys in (("attention", ("attention_proj", "attention_core")), ("expert_gemm", ("expert_gemm",)),
                     ("other", ("other",)), ("wall", RATE_KEYS)):
        v = np.array([sum(f[k] for k in keys) for f in per_it])
        out[ph] = float(v.mean() / np.median(v)) if len(v) and np.median(v) > 0 else 1.0
    return out


def _measured_stats(f: dict, m: dict) -> dict[str, dict]:
    """{stat: {phase or "wall": ms}} over the floor's iterations (measured, with tokens). mean: the floor's
    measured_ms (its "total" the wall); communication phases it lacks (floors written before it had them) from
    metrics iteration_ms, whose phase means are over every measured iteration (DEP's empty lock-step ones
    included). median: metrics iteration_ms_median (over the iterations with tokens)."""
    fm, every = f.get("measured_ms") or {}, m.get("iteration_ms") or {}
    mean = {**{k: every.get(k) for k in TIMED_PHASES if k not in ENGINE_PHASES}, **fm, "wall": fm.get("total")} if fm else {}
    return {"mean": mean, "median": m.get("iteration_ms_median") or {}}


def _point(r: dict, i: int, mode: str, f: dict, spec, load, path: str, notes: list, label: str) -> FloorPoint | None:
    cfg, m = r["config"], get(r, f"metrics.{mode}") or {}
    rates, fms = f.get("floor_tflops") or {}, f.get("floor_ms") or {}
    flops = {k: rates[k] * fms[k] * 1e9 for k in RATE_KEYS if _pos(rates.get(k)) and _pos(fms.get(k))}
    n, tokens = f.get("iterations"), m.get("tokens")
    if set(flops) != set(RATE_KEYS) or not _pos(n) or not _pos(tokens):
        notes.append(f"{label} {mode}: floor without FLOPs of every phase or without measured tokens; not used")
        return None
    ranks, gpus = int(get(cfg, "run.ranks", 1)), m.get("num_gpus")
    shared = bool(m.get("ranks_share_gpu") or (isinstance(gpus, int) and gpus < ranks))
    local = spec.num_experts / ranks if mode == "dep" and ranks > 1 else spec.num_experts
    measured: dict[str, dict[str, float]] = {}
    for stat, it in _measured_stats(f, m).items():
        d = {k: float(it[k]) for k in (*ENGINE_PHASES, "wall") if _pos(it.get(k))}
        if d:
            measured[stat] = {**d, "timed": sum(float(it.get(k) or 0.0) for k in TIMED_PHASES)}
    med = f.get("measured_over_floor_median") or {}
    excluded: dict[str, str] = {}
    allocs = get(m, "allocator_after_warmup") or {}
    if any(_pos(a.get("alloc_retries")) or _pos(a.get("ooms")) for a in allocs.values() if isinstance(a, dict)):
        excluded.update({f"{s}.{k}": "allocator retries / OOMs in measured iterations" for s in STATS for k in (*ENGINE_PHASES, "wall")})
    if shared:
        notes.append(f"{label} {mode}: {ranks} ranks shared {gpus} GPU(s) (time-slicing); marked, does not calibrate")
        excluded.update({f"{s}.{k}": f"ranks shared a GPU ({ranks} ranks on {gpus} GPU(s): time-slicing)"
                         for s in STATS for k in (*TIMED_PHASES, "wall")})
    calls = None
    if load is not None:
        rebuilt = floor_flops(spec, load)
        same = [k for k in RATE_KEYS if k != "expert_gemm" or local == spec.num_experts]
        off = {k: rebuilt[k] / flops[k] - 1 for k in same if abs(rebuilt[k] / flops[k] - 1) > SAME_WORK}
        if off:
            notes.append(f"{label} {mode}: rebuilt batches differ from the floor's work ({', '.join(f'{k} {v:+.2%}' for k, v in off.items())})")
        else:
            calls = float(np.mean(load.segments_SR[load.tokens_SR > 0])) * spec.num_layers
            if "mean" in measured and "median" in measured:
                spread = _spread(spec, load)
                for ph, x in spread.items():
                    mean, median = measured["mean"].get(ph), measured["median"].get(ph)
                    if mean and median and mean / median > x * (1 + REPEAT_TOLERANCE):
                        excluded.setdefault(f"mean.{ph}", f"mean {mean:.1f} ms vs median {median:.1f} ms, {mean / median / x:.2f}x "
                                                          "what the iterations' work explains: one-time costs in the mean")
    mark_wall(excluded)
    rows_per_expert = flops["expert_gemm"] / (6.0 * spec.hidden_size * spec.moe_intermediate * spec.num_moe_layers) / local
    return FloorPoint(
        source=path, run=i, run_id=run_id(r), mode=mode, campaign=str(Path(path).parent),
        date=str(get(r, "env.date", "") or ""), weight_dtype=get(cfg, "dwdp.weight_dtype", "bf16"),
        num_layers=spec.num_layers, tokens=float(tokens) / float(n),
        expert_tokens=rows_per_expert * spec.num_experts / spec.top_k, rows_per_expert=rows_per_expert, isl=float(get(cfg, "workload.isl", 0) or 0) or 1.0,
        calls=calls, flops=flops,
        floor_ms={**{k: float(fms[k]) for k in RATE_KEYS}, "attention": float(fms["attention_proj"] + fms["attention_core"])},
        measured=measured, over_floor_median={k: float(med[k]) for k in ENGINE_PHASES if _pos(med.get(k))},
        excluded=excluded, shared_gpu=shared, linear_dtype=linear_dtype(r.get("floor")))


def linear_dtype(floor: Any) -> str:
    """The dtype a run's linear layers ran in, from its floor: "fp8" when the floor timed FP8 block-scale GEMMs for
    them (bench/floor.py writes `linear_layers: "fp8 block scales"` since its FP8 linear layers), else the model dtype (bf16;
    floors written before them have no such key: the engine dequantised every linear layer to BF16 then)."""
    said = floor.get("linear_layers") if isinstance(floor, dict) else None
    return "fp8" if isinstance(said, str) and said.startswith("fp8") else "bf16"


def run_linear_dtype(run: dict) -> str:
    """The dtype a bench run's linear layers ran in: its floor's (linear_dtype) when it has one, else its config's
    model.fp8_linear (true: fp8; null: fp8 with FP8 experts); bf16 for a config without the key (written before
    the engine had FP8 linear layers, when it dequantised them)."""
    if isinstance(run.get("floor"), dict):
        return linear_dtype(run["floor"])
    model = get(run, "config.model") or {}
    if not isinstance(model, dict) or "fp8_linear" not in model:
        return "bf16"
    on = model["fp8_linear"]
    return "fp8" if on or (on is None and get(run, "config.dwdp.weight_dtype", "bf16") == "fp8") else "bf16"


def mark_wall(excluded: dict[str, str], why=lambda hit, first: f"contains {' and '.join(hit)} ({first})") -> dict[str, str]:
    """The wall contains the engine's phases: per statistic, "stat.wall" is excluded (when not already) as soon as
    one of its phases is, why(the excluded phases, the first one's reason) saying so. Updates and returns `excluded`."""
    for stat in STATS:
        hit = [ph for ph in ENGINE_PHASES if f"{stat}.{ph}" in excluded]
        if hit and f"{stat}.wall" not in excluded:
            excluded[f"{stat}.wall"] = why(hit, excluded[f"{stat}.{hit[0]}"])
    return excluded


def _same(a: FloorPoint, b: FloorPoint, keys) -> bool:
    return a.num_layers == b.num_layers and all(abs(a.flops[k] / b.flops[k] - 1) <= SAME_WORK for k in keys)


def _same_kind(a: FloorPoint, b: FloorPoint, phase: str) -> bool:
    """Work of equal FLOPs is the same work only in the same dtypes: the routed experts' (expert_gemm) in the weight
    dtype, the linear layers' (attention's projections, other's dense GEMMs) in the linear dtype; the wall in both."""
    return ((phase not in ("expert_gemm", "wall") or a.weight_dtype == b.weight_dtype)
            and (phase == "expert_gemm" or a.linear_dtype == b.linear_dtype))


def mark_unrepeatable(points: list[FloorPoint]) -> tuple[list[FloorPoint], list[str]]:
    """Compare, per (statistic, phase), the (run, mode)s of a campaign that did identical work. One-time costs only
    add time, so those within REPEAT_TOLERANCE of the lowest form the agreeing core: with two or more in it, only
    the ones above it are marked; when no two agree, the phase is marked in every point (its measurements in this
    campaign do not describe the work), and the wall with it. Returns the marked points and notes."""
    bad: dict[str, str] = {}  # campaign-wide
    own: dict[int, dict[str, str]] = {}  # per point (index)
    for stat in STATS:
        for phase in ENGINE_PHASES + ("wall",):
            key = f"{stat}.{phase}"
            works = {"attention": ("attention_proj", "attention_core"), "wall": RATE_KEYS}.get(phase, (phase,))
            usable = [i for i, p in enumerate(points) if phase in p.measured.get(stat, {}) and key not in p.excluded]
            seen, spreads = set(), []
            for i in usable:
                p = points[i]
                g = [j for j in usable if _same(p, points[j], works) and _same_kind(p, points[j], phase)]
                if len(g) < 2 or tuple(g) in seen:
                    continue
                seen.add(tuple(g))
                vals = {j: points[j].measured[stat][phase] for j in g}
                low = min(vals.values())
                core = [j for j in g if vals[j] <= low * (1 + REPEAT_TOLERANCE)]
                text = " vs ".join(f"{vals[j]:.1f} ms ({points[j].label})" for j in g)
                if len(core) == len(g):
                    continue
                if len(core) >= 2:
                    ref = ", ".join(points[j].label for j in core)
                    for j in g:
                        if j not in core:
                            own.setdefault(j, {})[key] = (f"{vals[j]:.1f} ms for work that {ref} measured at "
                                                          f"{min(vals[c] for c in core):.1f}-{max(vals[c] for c in core):.1f} ms: "
                                                          "one-time costs")
                else:
                    spreads.append(text)
            if spreads:
                bad[key] = f"not repeatable in this campaign (> {REPEAT_TOLERANCE:.0%} apart for identical work: {'; '.join(spreads)})"
    mark_wall(bad, lambda hit, _why: f"contains {' and '.join(hit)}, not repeatable in this campaign")
    out = []
    for i, p in enumerate(points):
        mine = mark_wall(own.get(i, {}))
        out.append(replace(p, excluded={**bad, **mine, **p.excluded}))
    notes = [f"{k}: {v}" for k, v in bad.items()]
    notes += [f"{points[i].label} {k}: {v}" for i, d in own.items() for k, v in d.items() if k.split(".")[1] != "wall"]
    return out, notes
