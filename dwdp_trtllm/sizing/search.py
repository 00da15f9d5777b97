"""Search the deployments that serve a traffic within its SLOs on the fewest GPUs, DWDP and DEP (pure).

The context and generation sides are searched apart, each by simulation (simulator.py), then the best of each
mode is simulated whole:
1. context, per mode: every group size whose ranks fit the GPU (memory.fit_deployment: the same per-rank GB as
   `dwdp plan` / `gen-config`) and every max_num_tokens; the count starts at the throughput bound (offered input
   tokens/s over one server's rate at a full iteration) and grows (DWDP by a group of G ranks, DEP by one server)
   until the context-only run (no generation) meets the TTFT SLOs; the fewest GPUs win (ties: lower TTFT p99).
2. generation (one answer for both modes: DWDP is applied to the context servers only, as in the paper): every
   server size `gen_tp` whose ranks fit and batch per rank whose KV cache fits the rank's free memory; the count
   starts at the throughput bound and grows until the whole run meets the TPS/user SLO; the fewest GPUs win.
3. each mode's best whole deployment, also under the planner's low and high scenarios (perf/uncertainty.py) for
   the ranges, and the binding constraint: what stopped one fewer GPU (context compute or prefetch, memory,
   generation, KV transfer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..deploy import memory as mem
from ..spec.config import DwdpConfig
from ..perf.plan_spec import PlanSpec
from ..spec.schema import ConfigError
from .context_cost import ContextCost, Segments
from .decode_cost import DecodeCost
from .metrics import Metrics, Slo, meets, summarize
from .simulator import Deployment, SimResult, simulate
from .traffic import Arrivals

#: KV-cache transfer bandwidth from a context to a generation server (GB/s, one way): one 400 Gb/s NIC per GPU
#: (an assumption; `--kv-gbps`): DeepSeek-R1 at 8K ISL moves ~0.6 GB of KV (BF16 floor, memory.kv_cache_floor_bytes)
DEFAULT_KV_GBPS = 50.0
#: generation servers' own max_num_tokens when sizing their ranks (TensorRT-LLM's default, gen_config.py)
GEN_MNT = 8192
MAX_STEPS = 64  # counts tried per candidate before giving up on it


@dataclass(frozen=True)
class Problem:
    """Everything the search reads."""

    spec: PlanSpec  # model, GPU, weight dtype, target, calibration (the planner's inputs)
    arrivals: Arrivals
    slo: Slo
    budget: int  # GPUs at most
    gpus_per_node: int
    dwdp_sizes: tuple[int, ...]
    dep_sizes: tuple[int, ...]
    mnts: tuple[int, ...]
    gen_tps: tuple[int, ...]
    gen_batches: tuple[int, ...]
    redundant: tuple[int, ...] = (0,)
    kv_gbps: float = DEFAULT_KV_GBPS

    @property
    def gpu_bytes(self) -> int:
        return int(self.spec.memory_budget_gb * 1e9)

    def kv_time(self, isl: int) -> float:
        return mem.kv_cache_floor_bytes(self.spec.model, isl) / (self.kv_gbps * 1e9)


@dataclass
class Outcome:
    """One mode's best deployment: nominal metrics, the low / high scenario metrics, binding constraint."""

    mode: str
    deployment: Deployment | None
    metrics: Metrics | None
    low: Metrics | None = None
    high: Metrics | None = None
    binding: str = ""
    why_none: str = ""
    result: SimResult | None = None
    memory_gb: float = 0.0  # per context rank (worst)


def _costs(p: Problem, mode: str, group: int, redundant: int, which: str = "nominal"):
    cost = ContextCost(p.spec, mode, group, redundant, which=which)
    return cost, (lambda s, segs: cost.seconds(segs))


def run_deployment(p: Problem, d: Deployment, dc: DecodeCost | None, which: str = "nominal",
                   context_only: bool = False) -> tuple[SimResult, ContextCost]:
    """Simulate deployment `d` on the problem's traffic (context_only: every OSL 1, no decode) under scenario `which`;
    the SimResult and the context cost (its binding-constraint counters)."""
    cost, ctx = _costs(p, d.mode, d.ctx_group, d.redundant, which)
    arr = p.arrivals
    if context_only:
        arr = replace(arr, osl=np.ones_like(arr.osl))
    step = (lambda tp, b, kv: dc.step_ms(tp, b, kv) * 1e-3) if dc is not None else (lambda tp, b, kv: 0.0)
    r = simulate(arr, d, ctx, step, p.kv_time)
    return r, cost


def context_fits(p: Problem, mode: str, group: int, mnt: int, redundant: int) -> mem.RankMemory | None:
    """The worst context rank's memory when it fits the GPU, else None."""
    try:
        cfg = DwdpConfig(dwdp_size=group, redundant_experts=redundant)
        cfg.validate_for(p.spec.model.num_experts, prefix="")
    except (ConfigError, ValueError):
        return None
    fit = mem.fit_deployment(p.spec.model, cfg, p.gpu_bytes, weight_dtype=p.spec.weight_dtype, max_num_tokens=mnt)
    rm = fit.dwdp if mode == "dwdp" else fit.dep
    return rm if rm.fits else None


def _offered_tokens_per_s(a: Arrivals) -> float:
    if a.closed_users:
        return math.nan
    return float(a.isl.sum()) / max(a.duration_s, 1e-9)


def _server_rate(p: Problem, mode: str, group: int, mnt: int, redundant: int) -> float:
    """Tokens/s of one context server running full iterations of requests of the traffic's mean ISL."""
    isl = int(max(1, round(float(np.mean(p.arrivals.isl)))))
    parts, left = [], mnt
    while left > 0:
        n = min(isl, left)
        parts.append((0, n, isl))
        left -= n
    ranks = 1 if mode == "dwdp" else group
    cost, _ = _costs(p, mode, group, redundant)
    return ranks * mnt / cost.seconds([Segments(tuple(parts))] * ranks)


def best_context(p: Problem, mode: str) -> tuple[Deployment | None, Metrics | None, str]:
    """The context side with the fewest GPUs meeting the TTFT SLOs (module docstring, step 1), its context-only
    metrics, and why none when none."""
    slo = Slo(p.slo.ttft_p50_s, p.slo.ttft_p99_s, None)
    best, why = None, []
    sizes = p.dwdp_sizes if mode == "dwdp" else p.dep_sizes
    for g in sizes:
        for r in (p.redundant if mode == "dwdp" else (0,)):
            for mnt in p.mnts:
                if context_fits(p, mode, g, mnt, r) is None:
                    why.append(f"{mode.upper()}{g} MNT {mnt}: does not fit {p.spec.gpu.name}")
                    continue
                unit = g if mode == "dwdp" else 1  # servers added per step
                gpus_per = 1 if mode == "dwdp" else g
                rate = _offered_tokens_per_s(p.arrivals)
                n0 = 1 if math.isnan(rate) else max(1, math.ceil(rate / _server_rate(p, mode, g, mnt, r)))
                n = unit * math.ceil(n0 / unit)
                for _ in range(MAX_STEPS):
                    if n * gpus_per > p.budget or (best and n * gpus_per > best[0].ctx_gpus):
                        break
                    d = Deployment(mode, g, n, mnt, 1, 1, 1, redundant=r)
                    m = summarize(run_deployment(p, d, None, context_only=True)[0], d.ctx_gpus, slo)
                    if meets(m, slo):
                        key = (d.ctx_gpus, m.ttft_p99_s)
                        if best is None or key < (best[0].ctx_gpus, best[1].ttft_p99_s):
                            best = (d, m)
                        break
                    n += unit
    if best is None:
        return None, None, "; ".join(why[:3]) or f"no {mode.upper()} context servers within {p.budget} GPUs meet the TTFT SLOs"
    return best[0], best[1], ""


def gen_batch_fits(p: Problem, tp: int, batch: int) -> bool:
    """A generation rank of a tp-GPU server holds its weights and `batch` requests' KV cache (ISL + OSL, the
    traffic's largest) in the share of its free memory gen-config gives the KV cache (memory.kv_batch_fit)."""
    m = mem.rank_memory(p.spec.model, "dep", group_size=tp, weight_dtype=p.spec.weight_dtype, max_num_tokens=GEN_MNT,
                        gpu_bytes=p.gpu_bytes, kv_tokens=0)
    ctx_len = int(np.max(p.arrivals.isl) + np.max(p.arrivals.osl))
    return batch <= mem.kv_batch_fit(p.gpu_bytes - m.total, mem.kv_cache_floor_bytes(p.spec.model, 1), ctx_len)


def best_generation(p: Problem, ctx: Deployment, dc: DecodeCost) -> tuple[Deployment | None, Metrics | None, str]:
    """The generation side with the fewest GPUs (module docstring, step 2) behind context side `ctx`."""
    best = None
    a = p.arrivals
    out_rate = math.nan if a.closed_users else float(np.sum(a.osl - 1)) / max(a.duration_s, 1e-9)
    kv_mid = float(np.mean(a.isl) + np.mean(a.osl) / 2)
    for tp in p.gen_tps:
        if tp > p.gpus_per_node:
            continue
        for b in p.gen_batches:
            if not gen_batch_fits(p, tp, b):
                continue
            step = dc.step_ms(tp, b, kv_mid) * 1e-3
            if p.slo.tps_user is not None and 1.0 / dc.step_ms(tp, 1, kv_mid) * 1e3 < p.slo.tps_user:
                continue  # even one request per rank is slower than the target
            n = 1 if math.isnan(out_rate) else max(1, math.ceil(out_rate / (tp * b / step)))
            for _ in range(MAX_STEPS):
                d = replace(ctx, gen_tp=tp, gen_servers=n, gen_batch=b)
                if d.gpus > p.budget or (best and d.gen_gpus > best[0].gen_gpus):
                    break
                m = summarize(run_deployment(p, d, dc)[0], d.gpus, p.slo)
                if meets(m, p.slo):
                    if best is None or (d.gen_gpus, -m.tps_user) < (best[0].gen_gpus, -best[1].tps_user):
                        best = (d, m)
                    break
                n += 1
    if best is None:
        return None, None, (f"no generation side meets the SLOs within the {p.budget}-GPU budget behind the context "
                            f"side ({ctx.ctx_label()}: {ctx.ctx_gpus} GPUs)")
    return best[0], best[1], ""


def _binding(p: Problem, d: Deployment, r: SimResult, cost: ContextCost, m: Metrics) -> str:
    ctx_share = d.ctx_gpus / d.gpus
    if ctx_share >= 0.5:
        if d.ctx_gpus <= d.ctx_group:
            return f"memory (one group of {d.ctx_group} GPUs: the smallest context side that fits)"
        if d.mode == "dwdp" and cost.iterations and cost.prefetch_bound / cost.iterations > 0.5:
            return "prefetch (DWDP iterations wait on the expert copies)"
        return "context compute (TTFT SLO)"
    kv_mean = r.kv_s / max(1, r.isl.size)
    if m.tpot_s > 0 and kv_mean > 0.1 * m.tpot_s * float(np.mean(r.osl)):
        return "KV transfer"
    return "generation (TPS/user SLO and decode throughput)"


def search(p: Problem, dc: DecodeCost, gen_from: str = "dwdp") -> dict[str, Outcome]:
    """The best DWDP and the best DEP deployment (module docstring)."""
    ctxs = {mode: best_context(p, mode) for mode in ("dwdp", "dep")}
    base = ctxs[gen_from][0] or ctxs["dep" if gen_from == "dwdp" else "dwdp"][0]
    gen = best_generation(p, base, dc) if base is not None else (None, None, "no context side fits")
    out = {}
    for mode, (cd, _, why) in ctxs.items():
        if cd is None or gen[0] is None:
            out[mode] = Outcome(mode, None, None, why_none=why or gen[2])
            continue
        d = replace(cd, gen_tp=gen[0].gen_tp, gen_servers=gen[0].gen_servers, gen_batch=gen[0].gen_batch)
        r, cost = run_deployment(p, d, dc)
        m = summarize(r, d.gpus, p.slo)
        lo = summarize(run_deployment(p, d, dc, "low")[0], d.gpus, p.slo)
        hi = summarize(run_deployment(p, d, dc, "high")[0], d.gpus, p.slo)
        rm = context_fits(p, mode, d.ctx_group, d.mnt, d.redundant)
        out[mode] = Outcome(mode, d, m, lo, hi, _binding(p, d, r, cost, m), result=r,
                            memory_gb=rm.total / 1e9 if rm else 0.0)
    return out


def pareto(p: Problem, ctx: Deployment, dc: DecodeCost) -> list[tuple[float, float]]:
    """(TPS/user, output TPS/GPU) behind context side `ctx`, one point per (gen_tp, batch) whose KV fits: the
    fewest generation servers the throughput bound allows (+1 until every request finishes), no TPS/user SLO."""
    a = p.arrivals
    out_rate = float(np.sum(a.osl - 1)) / max(a.duration_s, 1e-9) if not a.closed_users else math.nan
    kv_mid = float(np.mean(a.isl) + np.mean(a.osl) / 2)
    pts = []
    free = Slo(None, None, None)
    for tp in p.gen_tps:
        for b in p.gen_batches:
            if tp > p.gpus_per_node or not gen_batch_fits(p, tp, b):
                continue
            step = dc.step_ms(tp, b, kv_mid) * 1e-3
            n = 1 if math.isnan(out_rate) else max(1, math.ceil(out_rate / (tp * b / step)))
            d = replace(ctx, gen_tp=tp, gen_servers=n, gen_batch=b)
            m = summarize(run_deployment(p, d, dc)[0], d.gpus, free)
            pts.append((m.tps_user, m.output_tps_per_gpu))
    return pts
