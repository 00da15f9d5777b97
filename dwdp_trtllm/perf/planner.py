"""The planner: predict DWDP against DEP per (G, redundancy, slice size, ISL) and recommend a setup (pure).

One row = one configuration at one ISL. Per-layer times are for one MoE layer (as in the paper's
section 3); tps_per_gpu_* cover the whole model (dense layers included). Under imbalance the times
are normalised so that speedup = t_dep_us / t_dwdp_us is the DWDP/DEP throughput ratio.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..config import DwdpConfig
from ..models import ModelSpec
from ..memory import MAX_DWDP_SIZE, fit_deployment
from ..placement import make_placement
from ..schema import ConfigError
from . import cost_model as cm
from .bench_work import IterationLoad
from .calibration import Calibration
from .hardware import GpuSpec
from .imbalance import Workload, compare, per_rank_load, sample_requests

MiB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class PlanSpec:
    """What to plan for: model, GPU, candidate configurations and workload."""

    model: ModelSpec
    gpu: GpuSpec
    weight_dtype: str = "fp8"
    dwdp_sizes: tuple[int, ...] = (4,)
    isls: tuple[int, ...] = (8192,)
    batch: int | None = 1
    mnt: int | None = None
    isl_dist: str = "fixed"
    isl_ratio: float = 0.8
    isl_cv: float = 0.0
    imbalance_cv: float = 0.0
    redundant_experts: tuple[int, ...] = (0,)
    slice_bytes: tuple[int, ...] = (2 * MiB,)
    dispatch_dtype: str = "fp8"
    a2a_dedup: bool = False
    interference: float | None = None
    calibration: Calibration = field(default_factory=Calibration)
    gpu_memory_gb: float | None = None
    source_policy: str = "balanced"
    samples: int = 256
    seed: int = 0

    @property
    def memory_budget_gb(self) -> float:
        return self.gpu_memory_gb if self.gpu_memory_gb is not None else self.gpu.memory_gb

    def params(self) -> cm.CostParams:
        return cm.CostParams(gpu=self.gpu, weight_dtype=self.weight_dtype, dispatch_dtype=self.dispatch_dtype,
                             a2a_dedup=self.a2a_dedup, interference=self.interference, calibration=self.calibration)

    def workload(self, isl: int) -> Workload:
        return Workload(isl=isl, isl_dist=self.isl_dist, isl_ratio=self.isl_ratio, isl_cv=self.isl_cv,  # type: ignore[arg-type]
                        imbalance_cv=self.imbalance_cv, batch=self.batch, mnt=self.mnt,
                        samples=self.samples, seed=self.seed)


@dataclass(frozen=True)
class PlanRow:
    isl: int
    dwdp_size: int
    redundant_experts: int
    slice_bytes: int
    tokens_per_rank: float
    t_attention_us: float
    t_experts_dwdp_us: float
    t_experts_dep_us: float
    t_other_us: float
    t_dense_mlp_us: float  # the MLP of one first_k_dense layer
    t_compute_us: float  # DWDP rank compute per layer (no interference): the window that hides the prefetch
    t_compute_dep_us: float  # DEP rank compute per layer (own work + its expert share), no sync, no all-to-all
    t_prefetch_us: float
    t_all2all_us: float
    t_sync_us: float
    t_prefetch_wait_us: float  # DWDP compute waiting on copies (exposed prefetch)
    t_dep_us: float
    t_dwdp_us: float
    speedup: float  # t_dep_us / t_dwdp_us = DWDP/DEP throughput
    prefetch_hidden: bool
    compute_over_prefetch: float
    sync_overhead: float
    contention_slowdown: float
    fetch_gb: float
    memory_per_rank_gb: float  # memory.fit_deployment: the same per-rank bytes as `dwdp gen-config` checks
    memory_dep_gb: float
    fits: bool
    memory_parts_gb: dict  # experts held, prefetch slots, dense weights, activations, KV-cache floor
    smallest_fitting_dwdp_size: int | None  # same dtype and max_num_tokens, derived placement
    tps_per_gpu_dep: float
    tps_per_gpu_dwdp: float
    memory_dep_parts_gb: dict = None  # DEP at the same G: experts held, all-to-all buffers, dense, activations, KV floor
    smallest_fitting_dep_size: int | None = None  # memory.smallest_fitting for DEP (EP size)

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _dwdp_config(spec: PlanSpec, group: int, redundant: int) -> DwdpConfig:
    cfg = DwdpConfig(dwdp_size=group, redundant_experts=redundant, source_policy=spec.source_policy)  # type: ignore[arg-type]
    cfg.validate_for(spec.model.num_experts, prefix="")
    return cfg


# a placement depends only on (config, E): built once per planner process, not per (slice, ISL) row
_placement_of = functools.lru_cache(maxsize=256)(make_placement)


def _placement(spec: PlanSpec, group: int, redundant: int):
    return _placement_of(_dwdp_config(spec, group, redundant), spec.model.num_experts)


@functools.lru_cache(maxsize=256)
def _fit_of(model, cfg: DwdpConfig, gpu_bytes: int, weight_dtype: str, max_num_tokens: int):
    return fit_deployment(model, cfg, gpu_bytes, weight_dtype=weight_dtype, max_num_tokens=max_num_tokens)


def memory_fit(spec: PlanSpec, group: int, redundant: int, max_num_tokens: int):
    """memory.DeploymentFit of the worst rank (one model of per-rank bytes for `dwdp plan` and `dwdp gen-config`)."""
    return _fit_of(spec.model, _dwdp_config(spec, group, redundant), int(spec.memory_budget_gb * 1e9),
                   spec.weight_dtype, max(1, int(max_num_tokens)))


def sampled_load(spec: PlanSpec, isl: int, group: int) -> IterationLoad:
    """The workload model's iterations (whole requests packed up to MNT, or `batch` requests; a request longer
    than MNT is one chunk carrying its prorated share of the core), as the cost model's per-(sample, rank) load."""
    isl_SRK, tok_SRK = sample_requests(spec.workload(isl), group)
    tokens_SR, core_SR = per_rank_load(isl_SRK, tok_SRK, lambda x: cm.core_flops(spec.model, x))
    return IterationLoad(tokens_SR, tokens_SR, core_SR, (tok_SRK > 0).sum(-1).astype(float))


def predict(spec: PlanSpec, group: int, redundant: int, slice_bytes: int, isl: int,
            load: IterationLoad | None = None) -> PlanRow:
    """One row: cost every rank of the sampled workload (or of `load`, e.g. a bench run's rebuilt iterations)
    over `group` ranks, compare DEP with DWDP."""
    m, p = spec.model, spec.params()
    load = load if load is not None else sampled_load(spec, isl, group)
    tokens_SR = load.tokens_SR
    core_SR = cm.core_us(m, p, load.core_flops_SR, load.segments_SR, isl)
    attn_SR = cm.attention_us(m, p, tokens_SR, core_SR, isl=isl, kv_tokens=load.kv_tokens_SR)
    other_SR = cm.other_us(m, p, tokens_SR, isl=isl)
    experts_dwdp_SR = cm.experts_us(m, p, tokens_SR * m.top_k, m.num_experts, isl=isl)
    compute_SR = attn_SR + other_SR + experts_dwdp_SR

    placement = _placement(spec, group, redundant)
    t_p = cm.prefetch_us(m, p, placement, slice_bytes)
    f = p.overlap_slowdown
    dwdp_SR = cm.overlapped_us(compute_SR, t_p, f)

    own_SR = attn_SR + other_SR
    experts_dep_S = cm.experts_us(m, p, tokens_SR.sum(-1) * m.top_k / group, cm.ceil_div(m.num_experts, group), isl=isl)
    a2a_S = cm.all_to_all_us(m, p, tokens_SR, group)
    layer = compare(tokens_SR, own_SR, dwdp_SR, experts_dep_S + a2a_S)

    dense_SR = cm.dense_layer_us(m, p, tokens_SR, core_SR, isl=isl, kv_tokens=load.kv_tokens_SR) * m.first_k_dense
    n = m.num_moe_layers
    it = compare(tokens_SR, dense_SR + n * own_SR, dense_SR + n * dwdp_SR, n * (experts_dep_S + a2a_S))
    group_tokens = tokens_SR.sum() / tokens_SR.shape[0]

    max_tok = float(tokens_SR.max())
    fit = memory_fit(spec, group, redundant, spec.mnt or max_tok)
    mem = fit.total / 1e9
    mem_dep = fit.dep.total / 1e9  # memory.rank_memory(mode="dep"): ceil(E/G) experts, all-to-all buffers, no slots
    t_compute = float(compute_SR.mean())
    return PlanRow(
        isl=isl, dwdp_size=group, redundant_experts=redundant, slice_bytes=slice_bytes,
        tokens_per_rank=float(tokens_SR.mean()), t_attention_us=float(attn_SR.mean()),
        t_experts_dwdp_us=float(experts_dwdp_SR.mean()), t_experts_dep_us=float(np.mean(experts_dep_S)),
        t_other_us=float(other_SR.mean()), t_dense_mlp_us=float(cm.dense_mlp_us(m, p, tokens_SR, isl=isl).mean()), t_compute_us=t_compute,
        t_compute_dep_us=float(own_SR.mean() + np.mean(experts_dep_S)), t_prefetch_us=t_p,
        t_all2all_us=float(np.mean(a2a_S)), t_sync_us=layer.t_sync_us,
        t_prefetch_wait_us=float(np.maximum(0.0, t_p - compute_SR * f).mean()),
        t_dep_us=layer.t_dep_us, t_dwdp_us=layer.t_dwdp_us, speedup=layer.t_dep_us / layer.t_dwdp_us,
        prefetch_hidden=bool(t_compute * f >= t_p), compute_over_prefetch=t_compute / t_p if t_p else math.inf,
        sync_overhead=layer.sync_overhead,
        contention_slowdown=cm.contention_factor(p, group, slice_bytes > 0),
        fetch_gb=cm.fetch_bytes(m, placement, p.weight_dtype)[0] / 1e9,
        memory_per_rank_gb=mem, memory_dep_gb=mem_dep, fits=fit.fits,
        memory_parts_gb={k: round(v, 3) for k, v in fit.parts().items()}, smallest_fitting_dwdp_size=fit.smallest_fitting_dwdp_size,
        tps_per_gpu_dep=group_tokens / it.t_dep_us * 1e6 / group,
        tps_per_gpu_dwdp=group_tokens / it.t_dwdp_us * 1e6 / group,
        memory_dep_parts_gb={k: round(v / 1e9, 3) for k, v in fit.dep.parts().items()},
        smallest_fitting_dep_size=fit.smallest_fitting_dep_size)


def plan(spec: PlanSpec) -> list[PlanRow]:
    """Rows for every (G, redundant_experts, slice_bytes, ISL), in that nesting order."""
    return [predict(spec, g, r, s, isl) for g in spec.dwdp_sizes for r in spec.redundant_experts
            for s in spec.slice_bytes for isl in spec.isls]


@dataclass(frozen=True)
class Recommendation:
    use_dwdp: bool
    dwdp_size: int | None
    redundant_experts: int | None
    slice_bytes: int | None
    mean_speedup: float | None  # geometric mean over the ISLs of the chosen (or best) setup
    reason: str
    notes: tuple[str, ...] = ()


def _geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def fmt_bytes(n: int) -> str:
    if n == 0:
        return "unsliced"
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"


def recommend(spec: PlanSpec, rows: list[PlanRow]) -> Recommendation:
    """Best fitting configuration by geometric-mean speedup over the ISLs, or DEP with the reason."""
    configs: dict[tuple[int, int, int], list[PlanRow]] = {}
    for r in rows:
        configs.setdefault((r.dwdp_size, r.redundant_experts, r.slice_bytes), []).append(r)
    fitting = {k: v for k, v in configs.items() if k[0] > 1 and all(r.fits for r in v)}
    if not fitting:
        worst = min((r for r in rows if r.dwdp_size > 1), key=lambda r: r.memory_per_rank_gb, default=None)
        if worst:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in worst.memory_parts_gb.items())
            smallest = (f"the smallest dwdp_size that fits is {worst.smallest_fitting_dwdp_size}"
                        if worst.smallest_fitting_dwdp_size else f"no dwdp_size up to {MAX_DWDP_SIZE} fits")
            why = (f"memory does not fit: the smallest candidate DWDP setup (G={worst.dwdp_size}) needs "
                   f"{worst.memory_per_rank_gb:.1f} GB per rank ({parts} GB) > {spec.memory_budget_gb:.1f} GB; {smallest}")
            if worst.memory_dep_gb > spec.memory_budget_gb:  # DEP at that G does not fit either: no advice to use it
                dep = worst.smallest_fitting_dep_size
                return Recommendation(False, None, None, None, None, (
                    f"nothing fits {worst.dwdp_size} GPUs: DWDP{worst.dwdp_size} needs {worst.memory_per_rank_gb:.1f} GB "
                    f"per rank ({parts} GB), DEP{worst.dwdp_size} {worst.memory_dep_gb:.1f} GB, budget "
                    f"{spec.memory_budget_gb:.1f} GB; smallest GPU count that fits: DWDP "
                    f"{worst.smallest_fitting_dwdp_size or f'none up to {MAX_DWDP_SIZE}'}, DEP {dep or f'none up to {MAX_DWDP_SIZE}'}"))
        else:
            why = "no DWDP group size > 1 among the candidates"
        return Recommendation(False, None, None, None, None, f"use DEP here: {why}")
    # DEP stays available where DWDP loses, so a setup is scored by its gains only: geomean(max(speedup, 1))
    scores = {k: _geomean([max(r.speedup, 1.0) for r in v]) for k, v in fitting.items()}
    best = max(scores, key=lambda k: (scores[k], _geomean([r.speedup for r in fitting[k]]), -k[0], -k[1]))
    best_rows = fitting[best]
    score = _geomean([r.speedup for r in best_rows])
    notes = []
    losing = [r for r in best_rows if r.speedup <= 1]
    if len(losing) == len(best_rows):
        exposed = [r for r in best_rows if not r.prefetch_hidden]
        if exposed:
            why = "prefetch exposed: " + ", ".join(
                f"T_prefetch {r.t_prefetch_us:.0f} us > T_compute {r.t_compute_us:.0f} us at ISL {r.isl}" for r in exposed[:4])
        else:
            why = "the all-to-all and sync that DWDP removes cost less than the copy interference it adds"
        return Recommendation(False, None, None, None, score,
                              f"use DEP here: the best DWDP setup (G={best[0]}) reaches at most "
                              f"{max(r.speedup for r in best_rows):.2f}x; {why}")
    if losing:
        wins = [r.isl for r in best_rows if r.speedup > 1]
        notes.append("DWDP loses at ISL " + ", ".join(str(r.isl) for r in losing)
                     + " (prefetch not hidden or too little all-to-all to save): use DEP there, DWDP at ISL "
                     + ", ".join(map(str, wins)))
    eb = spec.model.expert_bytes(spec.weight_dtype)
    headroom = spec.memory_budget_gb - max(r.memory_per_rank_gb for r in best_rows)
    local = len(_placement(spec, best[0], best[1]).local_experts[0])
    extra = min(int(headroom * 1e9 // (eb * (spec.model.num_moe_layers + 2))), spec.model.num_experts - local)
    if extra > 0 and local + extra >= spec.model.num_experts:
        notes.append(f"{headroom:.1f} GB free per rank: every expert fits on every rank (plain data parallel, "
                     "no prefetch) -- compare with G=1")
    elif extra > 0:
        notes.append(f"{headroom:.1f} GB free per rank: up to {extra} more redundant experts per rank fit "
                     f"(try --redundant-experts {best[1] + extra})")
    cal = spec.calibration
    if best[2] and cal.slice_efficiency:
        s_best = max(cal.slice_efficiency, key=lambda pt: (pt[1], pt[0]))
        notes.append(f"measured slice efficiency is best at {fmt_bytes(int(s_best[0]))} ({s_best[1]:.2f} of bulk)")
    elif best[2]:
        notes.append(f"slice size {fmt_bytes(best[2])} is not calibrated: measure it with scripts/bench_copy.py")
    gains = ", ".join(f"{r.speedup:.2f}x at ISL {r.isl}" for r in best_rows if r.speedup > 1)
    return Recommendation(True, best[0], best[1], best[2], score,
                          f"use DWDP with G={best[0]}, redundant_experts={best[1]}, slice {fmt_bytes(best[2])}: "
                          f"predicted {gains} (DWDP/DEP throughput)", tuple(notes))


def check_candidates(spec: PlanSpec) -> None:
    """Reject impossible candidates with the CLI argument's name."""
    E = spec.model.num_experts
    for g in spec.dwdp_sizes:
        if g < 1 or g > E:
            raise ConfigError(None, "--dwdp-size", f"each G must be in [1, {E}] for {spec.model.name}, got {g}")
        for r in spec.redundant_experts:
            try:
                _placement(spec, g, r)
            except (ConfigError, ValueError) as e:
                raise ConfigError(None, "--redundant-experts", f"{r} with G={g}: {getattr(e, 'expected', e)}") from None
