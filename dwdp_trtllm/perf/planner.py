"""The planner: predict DWDP against DEP per (G, redundancy, slice size, ISL) and recommend a setup (pure).

One row = one configuration at one ISL. Per-layer times are for one MoE layer (as in the paper's
section 3); tps_per_gpu_* cover the whole model (dense layers included). Under imbalance the times
are normalised so that speedup = t_dep_us / t_dwdp_us is the DWDP/DEP throughput ratio.

Target (PlanSpec.target): "trtllm" prices compute and DEP communication with TensorRT-LLM's measured kernels
(perf/kernel_tables.py, package data), "engine" with our engine's calibration (perf/cost_model.py). Every row
carries its range (perf/uncertainty.py: speedup_low / speedup_high), the break-even tokens per rank per iteration
that hide the prefetch, and the table cells it extrapolated. perf/recommend.py reads the range.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from ..spec.config import DwdpConfig
from ..deploy.memory import fit_deployment
from ..core.placement import make_placement
from ..spec.schema import ConfigError
from . import cost_model as cm
from .bench_work import IterationLoad
from .imbalance import compare, per_rank_load, sample_requests, tokens_per_s_per_gpu
from .phases import Phases, Skew, engine_phases, table_dist, trtllm_phases
from .plan_row import PlanRow
from .plan_spec import PlanSpec
from .recommend import row_verdict
from . import inputs as inp
from .uncertainty import INPUTS, SKEWED_ROUTING, apply, peer_evidence, peer_range, scaled_gpu, scenario


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


def routing_skew(spec: PlanSpec, group: int, tokens_per_rank: float, rs=None) -> Skew:
    """The skew as the planner applies it (spec's, or `rs`): a table distribution (trtllm, power_law_1.01 / 1.2) or
    perf/imbalance.skew_term's factors over balanced times."""
    rs = spec.routing_skew if rs is None else rs
    if rs is None or getattr(rs, "off", True):
        return Skew()
    label = rs.label()
    dist = table_dist(label) if spec.tables is not None else None
    if dist is not None and rs.kind == "power_law":
        return Skew(label=label, dist=dist)
    from .imbalance import skew_term
    m = spec.model
    st = skew_term(rs, num_moe_layers=max(m.num_moe_layers, 1), num_experts=m.num_experts, top_k=m.top_k,
                   ep_size=group, tokens_per_rank=max(1, int(tokens_per_rank)))
    # an all-gather moves every token regardless of the routing; an all-to-all follows it
    a2a = 1.0 if spec.dep_comm_for(group) == "allgather_reducescatter" else st.dep_a2a_factor
    return Skew(label=label, dep_expert=st.dep_expert_factor, dep_a2a=a2a, dwdp_gemm=st.dwdp_gemm_factor)


def skewed_routing(spec: PlanSpec, group: int, tokens_per_rank: float) -> Skew:
    """The routing range's DWDP-better end (uncertainty.SKEWED_ROUTING) for an unstated routing."""
    from ..spec.routing_skew import RoutingSkewConfig
    alpha = float(SKEWED_ROUTING.rsplit("_", 1)[1])
    return routing_skew(spec, group, tokens_per_rank, RoutingSkewConfig(kind="power_law", alpha=alpha))


def phases(spec: PlanSpec, load: IterationLoad, group: int, isl: int, skew: Skew, variant: str = "trtllm") -> Phases:
    """The layer's phases on every rank, priced for spec's target and DEP `variant` (perf/dep_variants.py); DEP
    communication at a measured all-to-all bandwidth where a calibration sets one (perf/inputs.py: then measured,
    not ranged)."""
    t = spec.tables
    if t is None:
        return engine_phases(spec.model, spec.params(), load, group, isl, skew, spec.dep_comm_for(group))
    path = spec.dep_comm_for(group)
    ph = trtllm_phases(spec.model, t, spec.weight_dtype, load, group, isl, skew, path, spec.dwdp_experts.op)
    if variant == "deepep_deepgemm":
        from . import dep_variants
        g_tok = load.tokens_SR.sum(-1)
        skewed = t.moe_ms(spec.weight_dtype, group, skew.dist, g_tok)[0]
        bal = t.moe_ms(spec.weight_dtype, group, "balanced", g_tok)[0]
        factor = float(np.mean(skewed / bal)) * skew.dep_expert if skewed is not None and bal is not None else skew.dep_expert
        return dep_variants.deepep_deepgemm(spec, ph, load.tokens_SR, group, factor)
    gbps = spec.calibration.all_to_all_gbps
    if gbps and group > 1:
        if path == "allgather_reducescatter":
            comm = cm.allgather_reducescatter_us(spec.model, spec.params(), load.tokens_SR, group)
        else:  # DeepEP / NVLinkOneSided send a token once per destination rank
            comm = cm.all_to_all_us(spec.model, replace(spec.params(), a2a_dedup=True), load.tokens_SR, group) * skew.dep_a2a
        ph = replace(ph, comm_S=comm, comm_alt_S=comm, beyond={k: v for k, v in ph.beyond.items() if k != "DEP communication"},
                     comm_source=f"{path}: the measured all-to-all bandwidth {gbps:g} GB/s (calibration)")
    return ph


def _target(spec: PlanSpec) -> str:
    return "trtllm" if spec.tables is not None else "engine"


def _interference_override(spec: PlanSpec) -> float | dict | None:
    # --interference, or a calibration file's: one number, else `dwdp calibrate`'s per-phase slowdowns (plan drops
    # one-GPU bench interference before it gets here)
    if spec.interference is not None:
        return spec.interference
    cal = spec.calibration
    return cal.interference if cal.interference is not None else (dict(cal.interference_by_phase) or None)


def _scenario(spec: PlanSpec, group: int, which: str, only: str | None = None):
    """uncertainty.scenario with this plan's fixed inputs (perf/inputs.py) and its peer range at this group size."""
    measured = inp.is_measured(spec, "peer bandwidth")
    return scenario(which, only=only, interference=_interference_override(spec), fixed=inp.fixed(spec),
                    peer_range=peer_range(spec.gpu, group, measured),
                    wide_interference=bool(peer_evidence(spec.gpu, group, measured)))


def _layer(spec, phs, load, t_p, which, only=None, group=1, eff=None):
    """One layer under scenario `which` (phs: (routing end, efficiency end) -> Phases); `eff` overrides the
    scenario's efficiency end (the efficiencies' effect on DWDP/DEP is not monotonic: both ends are tried)."""
    sc = _scenario(spec, group, which, only)
    a = apply(phs[(sc.routing, eff or sc.eff)], sc, t_p, _target(spec))
    dwdp_SR = cm.overlapped_us(a.compute_SR, a.prefetch_us, a.slowdown_SR)
    return a, dwdp_SR, compare(load.tokens_SR, a.own_SR, dwdp_SR, a.experts_dep_S + a.comm_S)


@dataclass(frozen=True)
class IterationTimes:
    """Whole-model time of each iteration of a load (us): DEP per sample (its ranks in lock-step), DWDP per
    (sample, rank) (free-running), and which part bound each (for `dwdp size`'s binding constraint)."""

    dep_S: np.ndarray
    dwdp_SR: np.ndarray
    dwdp_prefetch_bound_SR: np.ndarray  # True where the exposed prefetch set the DWDP layer time
    dep_comm_S: np.ndarray  # DEP's communication share of dep_S


def iteration_times(spec: PlanSpec, load: IterationLoad, group: int, redundant: int, slice_bytes: int, isl: float,
                    which: str = "nominal", variant: str = "trtllm", extra_src_bytes: float = 0.0) -> IterationTimes:
    """Every iteration of `load` (any tokens per rank, e.g. a simulated server's batches) priced as predict prices its
    t_iteration_*: first_k_dense dense layers + MoE layers; DEP = the slowest rank's own work + the shared experts and
    communication, DWDP = each rank's compute overlapped with the prefetch. `which`: the uncertainty scenario
    (nominal / low / high). `isl`: the requests' length the attention tables are read at. `variant`: the DEP priced
    (perf/dep_variants.py), as predict's. `extra_src_bytes`: bytes per MoE layer a DWDP rank sends besides its
    experts on the same links (cost_model.prefetch_us)."""
    m, p = spec.model, spec.params()
    phs = scenario_phases(spec, load, group, int(max(1, round(isl))), float(max(load.tokens_SR.mean(), 1.0)), variant)
    ph = phs[("balanced", "nominal")]
    t_p = cm.prefetch_us(m, p, _placement(spec, group, redundant), slice_bytes, extra_src_bytes)
    a, dwdp_SR, _ = _layer(spec, phs, load, t_p, which, group=group)
    dense_SR = ph.dense_layer_SR * m.first_k_dense
    n = m.num_moe_layers
    busy = load.tokens_SR > 0
    dep_S = np.max(np.where(busy, dense_SR + n * a.own_SR, 0.0), -1) + n * (a.experts_dep_S + a.comm_S)
    return IterationTimes(dep_S=np.asarray(dep_S, float), dwdp_SR=np.where(busy, dense_SR + n * dwdp_SR, 0.0),
                          dwdp_prefetch_bound_SR=busy & (a.compute_SR * a.slowdown_SR < a.prefetch_us),
                          dep_comm_S=np.broadcast_to(n * np.asarray(a.comm_S, float), dep_S.shape))


def break_even_tokens(spec: PlanSpec, group: int, redundant: int, slice_bytes: int, isl: int, which: str = "nominal",
                      skew: Skew | None = None) -> float:
    """Tokens per rank per iteration (requests of length `isl`; a chunk of one when fewer) whose slowed DWDP compute
    covers the prefetch of one layer: below it the copy is exposed. inf when no size up to 2**24 hides it."""
    t_p = cm.prefetch_us(spec.model, spec.params(), _placement(spec, group, redundant), slice_bytes)
    if t_p <= 0:
        return 0.0
    m = spec.model
    skew = skew or Skew()

    def covered(tokens: float) -> bool:
        n = tokens / isl
        core = n * float(cm.core_flops(m, isl))
        tok = np.array([[tokens]])
        load = IterationLoad(tok, tok, np.array([[core]]), np.array([[max(1.0, n)]]))
        sc = _scenario(spec, group, which)
        s2 = spec if sc.eff == "nominal" else replace(spec, gpu=scaled_gpu(spec.gpu, sc.eff))
        a = apply(phases(s2, load, 1, isl, skew), sc, t_p, _target(spec))
        return bool((a.compute_SR * a.slowdown_SR >= a.prefetch_us).all())

    lo, hi = 0.0, 24.0
    if not covered(2 ** hi):
        return math.inf
    for _ in range(30):  # bisection in log2(tokens)
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if covered(2 ** mid) else (mid, hi)
    return float(2 ** hi)


def depends_on(spec: PlanSpec, phs: dict, load: IterationLoad, t_p: float, group: int, nominal: float,
               s_lo: float, s_hi: float) -> str:
    """The ranged input whose end alone moves the speedup most toward 1 from the nominal's side (its worse end when
    the nominal is above 1, its better end when below); "" when the range does not cross 1 or nothing is ranged."""
    if s_lo > 1.0 or s_hi < 1.0:
        return ""
    end = "low" if nominal >= 1.0 else "high"
    ranged = [i for i in INPUTS if i not in inp.fixed(spec)]
    swings = {}
    for i in ranged:
        ends = ("low", "high") if i == "compute efficiencies" else (None,)
        rs = [_layer(spec, phs, load, t_p, end, i, group=group, eff=e)[2] for e in ends]
        swings[i] = max(abs(r.t_dep_us / r.t_dwdp_us - nominal) for r in rs)
    return max(swings, key=lambda k: swings[k]) if swings and max(swings.values()) > 0 else ""


def scenario_phases(spec: PlanSpec, load: IterationLoad, group: int, isl: int, tokens: float,
                    variant: str = "trtllm") -> dict:
    """(routing end, efficiency end) -> Phases of `load`: the one construction predict and iteration_times price
    their scenarios with. Routing: balanced (or the stated skew) and the tables' power-law rows unless the routing
    is fixed; efficiencies: the spec's GPU rescaled to each end unless they are fixed (measured or stated)."""
    skew = routing_skew(spec, group, tokens)
    ph = phases(spec, load, group, isl, skew, variant)
    fixed = inp.fixed(spec)
    skewed = ph if "routing" in fixed or group <= 1 else phases(spec, load, group, isl,
                                                               skewed_routing(spec, group, tokens), variant)
    phs = {("balanced", "nominal"): ph, ("skewed", "nominal"): skewed}
    for end in ("low", "high"):  # assumed compute efficiencies (engine target): the spec's GPU rescaled
        if "compute efficiencies" in fixed:
            phs[("balanced", end)], phs[("skewed", end)] = ph, skewed
            continue
        s2 = replace(spec, gpu=scaled_gpu(spec.gpu, end))
        phs[("balanced", end)] = phases(s2, load, group, isl, skew, variant)
        phs[("skewed", end)] = phs[("balanced", end)] if skewed is ph else phases(
            s2, load, group, isl, skewed_routing(s2, group, tokens), variant)
    return phs


def predict(spec: PlanSpec, group: int, redundant: int, slice_bytes: int, isl: int,
            load: IterationLoad | None = None, variant: str = "trtllm") -> PlanRow:
    """One row: cost every rank of the sampled workload (or of `load`, e.g. a bench run's rebuilt iterations)
    over `group` ranks, compare DEP with DWDP; nominal, and the range over the uncertain inputs."""
    m, p = spec.model, spec.params()
    load = load if load is not None else sampled_load(spec, isl, group)
    tokens_SR = load.tokens_SR
    skew = routing_skew(spec, group, float(tokens_SR.mean()))
    phs = scenario_phases(spec, load, group, isl, float(tokens_SR.mean()), variant)
    ph = phs[("balanced", "nominal")]
    placement = _placement(spec, group, redundant)
    t_p = cm.prefetch_us(m, p, placement, slice_bytes)
    a, dwdp_SR, layer = _layer(spec, phs, load, t_p, "nominal", group=group)
    compute_SR, f = a.compute_SR, a.slowdown_SR
    def ratio(x):
        return x.t_dep_us / x.t_dwdp_us
    lo = min((_layer(spec, phs, load, t_p, "low", group=group, eff=e)[2] for e in ("low", "high")), key=ratio)
    hi = max((_layer(spec, phs, load, t_p, "high", group=group, eff=e)[2] for e in ("low", "high")), key=ratio)
    s_lo, s_hi = lo.t_dep_us / lo.t_dwdp_us, hi.t_dep_us / hi.t_dwdp_us
    depends = depends_on(spec, phs, load, t_p, group, layer.t_dep_us / layer.t_dwdp_us, s_lo, s_hi)

    own_SR, experts_dep_S, a2a_S = a.own_SR, a.experts_dep_S, a.comm_S
    dense_SR = ph.dense_layer_SR * m.first_k_dense
    n = m.num_moe_layers
    it = compare(tokens_SR, dense_SR + n * own_SR, dense_SR + n * dwdp_SR, n * (experts_dep_S + a2a_S))
    group_tokens = tokens_SR.sum() / tokens_SR.shape[0]
    attn_SR = ph.attention_SR
    other_SR = ph.other_SR

    max_tok = float(tokens_SR.max())
    fit = memory_fit(spec, group, redundant, spec.mnt or max_tok)
    mem = fit.total / 1e9
    mem_dep = fit.dep.total / 1e9  # memory.rank_memory(mode="dep"): ceil(E/G) experts, all-to-all buffers, no slots
    t_compute = float(compute_SR.mean())
    t_p_eff = a.prefetch_us
    be = [break_even_tokens(spec, group, redundant, slice_bytes, isl, w, skew) for w in ("nominal", "low", "high")]
    extrap = {k: f"{2 ** v:.1f}x the last row" for k, v in ph.beyond.items() if v > 0.01}
    return PlanRow(
        isl=isl, dwdp_size=group, redundant_experts=redundant, slice_bytes=slice_bytes,
        tokens_per_rank=float(tokens_SR.mean()), t_attention_us=float(attn_SR.mean()),
        t_experts_dwdp_us=float(ph.experts_dwdp_SR.mean()), t_experts_dep_us=float(np.mean(experts_dep_S)),
        t_other_us=float(other_SR.mean()),
        t_dense_mlp_us=float((ph.dense_layer_SR - attn_SR).mean()), t_compute_us=t_compute,
        t_compute_dep_us=float(own_SR.mean() + np.mean(experts_dep_S)), t_prefetch_us=t_p_eff,
        t_all2all_us=float(np.mean(a2a_S)), t_sync_us=layer.t_sync_us,
        t_prefetch_wait_us=float(np.maximum(0.0, t_p_eff - compute_SR * f).mean()),
        t_dep_us=layer.t_dep_us, t_dwdp_us=layer.t_dwdp_us, speedup=layer.t_dep_us / layer.t_dwdp_us,
        prefetch_hidden=bool((compute_SR * f).mean() >= t_p_eff),
        compute_over_prefetch=t_compute / t_p_eff if t_p_eff else math.inf,
        sync_overhead=layer.sync_overhead,
        contention_slowdown=cm.contention_factor(p, group, slice_bytes > 0),
        fetch_gb=cm.fetch_bytes(m, placement, p.weight_dtype)[0] / 1e9,
        memory_per_rank_gb=mem, memory_dep_gb=mem_dep, fits=fit.fits,
        memory_parts_gb={k: round(v, 3) for k, v in fit.parts().items()}, smallest_fitting_dwdp_size=fit.smallest_fitting_dwdp_size,
        tps_per_gpu_dep=tokens_per_s_per_gpu(group_tokens / group, it.t_dep_us),
        tps_per_gpu_dwdp=tokens_per_s_per_gpu(group_tokens / group, it.t_dwdp_us),
        t_iteration_dep_us=it.t_dep_us, t_iteration_dwdp_us=it.t_dwdp_us,
        memory_dep_parts_gb={k: round(v / 1e9, 3) for k, v in fit.dep.parts().items()},
        smallest_fitting_dep_size=fit.smallest_fitting_dep_size,
        target=spec.priced_as, speedup_low=s_lo, speedup_high=s_hi,
        t_dep_us_range=(lo.t_dep_us, hi.t_dep_us), t_dwdp_us_range=(lo.t_dwdp_us, hi.t_dwdp_us),
        depends_on=depends, break_even_tokens=be[0], break_even_range=(min(be), max(be)), extrapolated=extrap,
        routing_skew=skew.label, local_experts=len(placement.local_experts[0]), dep_fits=bool(fit.dep.fits),
        verdict=row_verdict(s_lo, s_hi, fit.fits, bool(fit.dep.fits)), dep_comm=ph.comm_source, dep_variant=variant)


def plan(spec: PlanSpec) -> list[PlanRow]:
    """Rows for every (DEP variant, G, redundant_experts, slice_bytes, ISL), in that nesting order."""
    return [predict(spec, g, r, s, isl, variant=v) for v in spec.dep_variants for g in spec.dwdp_sizes
            for r in spec.redundant_experts for s in spec.slice_bytes for isl in spec.isls]


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

