"""Search the deployments that serve a traffic within its SLOs on the fewest GPUs, DWDP and DEP (pure).

The context and generation sides are searched apart, each by simulation (simulator.py), then the best of each
mode is simulated whole:
1. context, per mode: every group size whose ranks fit the GPU (memory.fit_deployment: the same per-rank GB as
   `dwdp plan` / `gen-config`) and every max_num_tokens; the count starts at the throughput bound (offered input
   tokens/s over one server's rate at a full iteration) and grows (DWDP by a group of G ranks, DEP by one server)
   until the context-only run (no generation) meets the TTFT SLOs; the fewest GPUs win (ties: lower TTFT p99).
   Modes: DWDP, DEP and TP (tp_cost.py: TensorRT-LLM's TP attention + EP MoE context server; --tp-size).
2. generation, behind each mode's own context side (DWDP is applied to the context servers only, as in the paper,
   but a mode's context GPUs and first-token timing decide what budget and arrivals its generation side has): every
   server size `gen_tp` whose ranks fit, parallel shape (attention TP `gen_attn_tps`, MoE TP `gen_moe_tps`: the
   shapes decode_cost can price; attention DP + EP by default) and batch per attention group whose KV cache fits the
   rank's free memory; the count
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
MODES = ("dwdp", "dep", "tp")


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
    tp_sizes: tuple[int, ...] = ()  # TP context server sizes (empty: no TP option)
    dep_variant: str = "trtllm"  # the DEP priced (perf/dep_variants.py; --dep)
    slice_bytes: int = 2 << 20  # DWDP's copy slices (0: unsliced; --slice-bytes)
    span_s: float | None = None  # the offered traffic's stated span (--duration of generated open-loop traffic)
    ctx_max_batch: int = 0  # requests per context iteration per rank (0: no limit; --ctx-max-batch)
    chunked: bool = True  # chunked prefill on the context servers (--no-chunked-prefill: whole prompts)
    gen_attn_tps: tuple[int, ...] = (1,)  # generation servers' attention TP (1: attention DP; else the server's size)
    gen_moe_tps: tuple[int, ...] = (1,)  # generation servers' MoE TP (EP: gen_tp / moe TP)
    progress: object = None  # called with one line per simulated candidate (the command's stderr progress)

    def sizes(self, mode: str) -> tuple[int, ...]:
        return {"dwdp": self.dwdp_sizes, "dep": self.dep_sizes, "tp": self.tp_sizes}[mode]

    def summarize(self, r, gpus: int, slo: Slo | None = None) -> Metrics:
        """metrics.summarize over this problem's window (one place for every caller)."""
        return summarize(r, gpus, self.slo if slo is None else slo, span_s=self.span_s)

    def tick(self, what: str) -> None:
        if self.progress is not None:
            self.progress(what)

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
    if mode == "tp":
        from .tp_cost import TpCost
        cost = TpCost(p.spec, mode, group, which=which)
    else:
        cost = ContextCost(p.spec, mode, group, redundant, slice_bytes=p.slice_bytes, which=which,
                           variant=p.dep_variant)
    return cost, (lambda s, segs: cost.seconds(segs))


def run_deployment(p: Problem, d: Deployment, dc: DecodeCost | None, which: str = "nominal",
                   context_only: bool = False) -> tuple[SimResult, ContextCost]:
    """Simulate deployment `d` on the problem's traffic (context_only: every OSL 1, no decode) under scenario `which`;
    the SimResult and the context cost (its binding-constraint counters)."""
    cost, ctx = _costs(p, d.mode, d.ctx_group, d.redundant, which)
    arr = p.arrivals
    if context_only:
        arr = replace(arr, osl=np.ones_like(arr.osl))
    step = ((lambda tp, b, kv: dc.step_ms(tp, b, kv, d.gen_attn_tp, d.gen_moe_tp) * 1e-3) if dc is not None
            else (lambda tp, b, kv: 0.0))
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
    # TP: priced as a DEP rank of the same size (1/N of the experts, the attention weights whole): an upper bound
    # on a TP rank, which also splits the attention weights
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
    ranks = group if mode == "dep" else 1
    cost, _ = _costs(p, mode, group, redundant)
    return ranks * mnt / cost.seconds([Segments(tuple(parts))] * ranks)


def _slo_miss(m: Metrics, slo: Slo) -> tuple[str, float, float] | None:
    """The first SLO run `m` misses: (flag, target, reached), or None."""
    for flag, target, got, worse in (("--ttft-p99", slo.ttft_p99_s, m.ttft_p99_s, 1), ("--ttft-p50", slo.ttft_p50_s,
                                     m.ttft_p50_s, 1), ("--tps-user", slo.tps_user, m.tps_user, -1)):
        if target is not None and not (math.isfinite(got) and worse * got <= worse * target):
            return flag, target, got
    return None


def why_missed(best_miss: Metrics | None, slo: Slo, budget: int, side: str, smallest: int | None) -> str:
    """Why no candidate of a side met the SLOs, naming the binding constraint: the SLO no candidate within the budget
    met and how close the best came, else unfinished requests, else the budget against the smallest side that fits."""
    if best_miss is not None:
        miss = _slo_miss(best_miss, slo)
        if miss is not None:
            flag, target, got = miss
            unit = " tokens/s" if flag == "--tps-user" else " s"
            best = "fastest" if flag != "--tps-user" else "best"
            return f"no {side} meets {flag} {target:g}{unit}; the {best} reaches {got:.3g}{unit}"
        if best_miss.completed < best_miss.requests:
            return (f"no {side} within --gpu-budget {budget} finishes every request (the best left "
                    f"{best_miss.requests - best_miss.completed} of {best_miss.requests} unfinished)")
    if smallest is not None and smallest > budget:
        return f"{side}: the smallest that fits makes {smallest} GPUs in all, more than --gpu-budget {budget}"
    return f"no {side} within --gpu-budget {budget} meets the SLOs"


def _closer(a: Metrics, b: Metrics | None, slo: Slo) -> bool:
    """Run `a` comes closer to the SLOs than `b` (more requests finished, then a lower TTFT p99 / p50, a higher
    TPS/user): the one whose miss the refusal reports."""
    if b is None:
        return True
    key = lambda m: (-(m.completed / max(m.requests, 1)), m.ttft_p99_s, m.ttft_p50_s,  # noqa: E731
                     -(m.tps_user if math.isfinite(m.tps_user) else -math.inf))
    return key(a) < key(b)


def best_context(p: Problem, mode: str) -> tuple[Deployment | None, Metrics | None, str]:
    """The context side with the fewest GPUs meeting the TTFT SLOs (module docstring, step 1), its context-only
    metrics, and why none when none (the binding constraint: why_missed)."""
    slo = Slo(p.slo.ttft_p50_s, p.slo.ttft_p99_s, None)
    best, why, miss, smallest, bound = None, [], None, None, None
    for g in p.sizes(mode):
        for r in (p.redundant if mode == "dwdp" else (0,)):
            for mnt in p.mnts:
                if context_fits(p, mode, g, mnt, r) is None:
                    why.append(f"{mode.upper()}{g} MNT {mnt}: does not fit {p.spec.gpu.name}")
                    continue
                unit = g if mode == "dwdp" else 1  # servers added per step
                gpus_per = 1 if mode == "dwdp" else g
                smallest = min(smallest or 1 << 30, unit * gpus_per)
                rate = _offered_tokens_per_s(p.arrivals)
                n0 = 1 if math.isnan(rate) else max(1, math.ceil(rate / _server_rate(p, mode, g, mnt, r)))
                n = unit * math.ceil(n0 / unit)
                bound = min(bound or 1 << 30, n * gpus_per)
                for _ in range(MAX_STEPS):
                    if n * gpus_per > p.budget or (best and n * gpus_per > best[0].ctx_gpus):
                        break
                    d = Deployment(mode, g, n, mnt, 1, 1, 1, redundant=r, ctx_max_batch=p.ctx_max_batch,
                                   chunked=p.chunked)
                    p.tick(f"{mode.upper()} context: {d.ctx_label()}")
                    m = p.summarize(run_deployment(p, d, None, context_only=True)[0], d.ctx_gpus, slo)
                    if meets(m, slo):
                        key = (d.ctx_gpus, m.ttft_p99_s)
                        if best is None or key < (best[0].ctx_gpus, best[1].ttft_p99_s):
                            best = (d, m)
                        break
                    if _closer(m, miss, slo):
                        miss = m
                    n += unit
    if best is None:
        if smallest is None:
            return None, None, "; ".join(why[:3]) or f"no {mode.upper()} context server fits"
        side = f"{mode.upper()} context side"
        if miss is None and smallest <= p.budget and bound is not None and bound > p.budget:
            rate = _offered_tokens_per_s(p.arrivals)
            return None, None, (f"{side}: the offered {rate:,.0f} input tokens/s need at least {bound} GPUs at full "
                                f"iterations, more than --gpu-budget {p.budget}")
        return None, None, why_missed(miss, slo, p.budget, side, smallest)
    return best[0], best[1], ""


def gen_batch_fits(p: Problem, tp: int, batch: int, attn_tp: int = 1) -> bool:
    """A generation rank of a tp-GPU server holds its weights and `batch` requests' KV cache (ISL + OSL, the
    traffic's largest) in the share of its free memory gen-config gives the KV cache (memory.kv_batch_fit). With
    attention TP (`attn_tp` > 1) `batch` is the group's, and every GPU of the group holds all of it (MLA caches one
    latent vector per token, not split over heads); the weights are priced as a DEP rank's (attention whole: an upper
    bound where attention TP splits it)."""
    m = mem.rank_memory(p.spec.model, "dep", group_size=tp, weight_dtype=p.spec.weight_dtype, max_num_tokens=GEN_MNT,
                        gpu_bytes=p.gpu_bytes, kv_tokens=0)
    ctx_len = int(np.max(p.arrivals.isl) + np.max(p.arrivals.osl))
    return batch <= mem.kv_batch_fit(p.gpu_bytes - m.total, mem.kv_cache_floor_bytes(p.spec.model, 1), ctx_len)


def gen_shapes(p: Problem, dc: DecodeCost) -> list[tuple[int, int, int]]:
    """(gen_tp, attention TP, MoE TP) of every generation server the problem names and the tables price, in the
    order the flags give them (an attention TP applies to the servers of its size); ConfigError naming the flag when
    a named attention TP or MoE TP fits none of the --gen-tp sizes."""
    out = []
    for a in p.gen_attn_tps:
        for e in p.gen_moe_tps:
            why = None
            for tp in p.gen_tps:
                w = dc.shape_why(tp, a, e)
                if w is None:
                    out.append((tp, a, e))
                else:
                    why = why or w
            if not any(x[1:] == (a, e) for x in out) and why is not None:
                raise ConfigError(None, why[0], why[1])
    return out


def best_generation(p: Problem, ctx: Deployment, dc: DecodeCost,
                    first: tuple[int, int, int, int] | None = None) -> tuple[Deployment | None, Metrics | None, str]:
    """The generation side with the fewest GPUs (module docstring, step 2) behind context side `ctx`. `first`: the
    (gen_tp, attention TP, MoE TP, batch) tried first (another mode's answer: it bounds the search early; the answer
    does not depend on the order)."""
    best, miss, smallest = None, None, None
    a = p.arrivals
    out_rate = math.nan if a.closed_users else float(np.sum(a.osl - 1)) / max(a.duration_s, 1e-9)
    kv_mid = float(np.mean(a.isl) + np.mean(a.osl) / 2)
    cands = [(tp, a, e, b) for tp, a, e in gen_shapes(p, dc) for b in p.gen_batches]
    if first in cands:
        cands.remove(first)
        cands.insert(0, first)
    slow = None
    for tp, a, e, b in cands:
        if tp > p.gpus_per_node or not gen_batch_fits(p, tp, b, a):
            continue
        smallest = min(smallest or 1 << 30, tp)
        step = dc.step_ms(tp, b, kv_mid, a, e) * 1e-3
        fastest = 1.0 / dc.step_ms(tp, 1, kv_mid, a, e) * 1e3
        if p.slo.tps_user is not None and fastest < p.slo.tps_user:
            slow = max(slow or 0.0, fastest)
            continue  # even one request per rank is slower than the target
        n = 1 if math.isnan(out_rate) else max(1, math.ceil(out_rate / (tp // a * b / step)))
        for _ in range(MAX_STEPS):
            d = replace(ctx, gen_tp=tp, gen_servers=n, gen_batch=b, gen_attn_tp=a, gen_moe_tp=e)
            if d.gpus > p.budget or (best and d.gen_gpus > best[0].gen_gpus):
                break
            p.tick(f"{ctx.mode.upper()} generation: {n} x {tp} GPUs {d.gen_shape() or 'DEP'}, batch {b}")
            m = p.summarize(run_deployment(p, d, dc)[0], d.gpus)
            if meets(m, p.slo):
                if best is None or (d.gen_gpus, -m.tps_user) < (best[0].gen_gpus, -best[1].tps_user):
                    best = (d, m)
                break
            if _closer(m, miss, p.slo):
                miss = m
            n += 1
    if best is None:
        if miss is None and slow is not None:
            return None, None, (f"no generation side meets --tps-user {p.slo.tps_user:g} tokens/s; the best reaches "
                                f"{slow:.3g} tokens/s (one request per rank)")
        side = f"generation side behind {ctx.ctx_label()} ({ctx.ctx_gpus} GPUs)"
        return None, None, why_missed(miss, p.slo, p.budget, side, None if smallest is None else smallest + ctx.ctx_gpus)
    return best[0], best[1], ""


def _binding(p: Problem, d: Deployment, r: SimResult, cost: ContextCost, m: Metrics) -> str:
    ctx_share = d.ctx_gpus / d.gpus
    if ctx_share >= 0.5:
        if d.ctx_gpus <= d.ctx_group:
            return f"memory (one group of {d.ctx_group} GPUs: the smallest context side that fits)"
        if d.mode == "dwdp" and cost.iterations and cost.prefetch_bound / cost.iterations > 0.5:
            return "prefetch (DWDP iterations wait on the expert copies)"
        return "context compute (TTFT SLO)" if (p.slo.ttft_p50_s or p.slo.ttft_p99_s) else \
            "context compute (keeping up with the offered tokens)"
    kv_mean = r.kv_s / max(1, r.isl.size)
    if m.tpot_s > 0 and kv_mean > 0.1 * m.tpot_s * float(np.mean(r.osl)):
        return "KV transfer"
    return "generation (TPS/user SLO and decode throughput)" if p.slo.tps_user else \
        "generation (decode throughput)"


def modes(p: Problem) -> tuple[str, ...]:
    """The context modes this problem compares: DWDP, DEP, and TP when --tp-size names sizes."""
    return tuple(m for m in MODES if p.sizes(m))


def search(p: Problem, dc: DecodeCost) -> dict[str, Outcome]:
    """The best deployment of each mode (module docstring): its context side, then its own generation side."""
    out, first = {}, None
    for mode in modes(p):
        cd, _, why = best_context(p, mode)
        if cd is None:
            out[mode] = Outcome(mode, None, None, why_none=why)
            continue
        gd, _, gwhy = best_generation(p, cd, dc, first)
        if gd is None:
            out[mode] = Outcome(mode, None, None, why_none=gwhy)
            continue
        first = (gd.gen_tp, gd.gen_attn_tp, gd.gen_moe_tp, gd.gen_batch)
        d = gd
        p.tick(f"{mode.upper()}: the chosen deployment, nominal and the range's two ends")
        r, cost = run_deployment(p, d, dc)
        m = p.summarize(r, d.gpus)
        lo = p.summarize(run_deployment(p, d, dc, "low")[0], d.gpus)
        hi = p.summarize(run_deployment(p, d, dc, "high")[0], d.gpus)
        rm = context_fits(p, mode, d.ctx_group, d.mnt, d.redundant)
        out[mode] = Outcome(mode, d, m, lo, hi, _binding(p, d, r, cost, m), result=r,
                            memory_gb=rm.total / 1e9 if rm else 0.0)
    return out


def pareto(p: Problem, ctx: Deployment, dc: DecodeCost) -> list[tuple[float, float, str]]:
    """(TPS/user, output TPS/GPU, label) behind context side `ctx`, one point per (gen_tp, batch) whose KV fits: the
    fewest generation servers the throughput bound allows, no TPS/user SLO. The label names the deployment: its
    GPUs, context servers and generation servers."""
    a = p.arrivals
    out_rate = float(np.sum(a.osl - 1)) / max(a.duration_s, 1e-9) if not a.closed_users else math.nan
    kv_mid = float(np.mean(a.isl) + np.mean(a.osl) / 2)
    pts = []
    free = Slo(None, None, None)
    for tp, a, e in gen_shapes(p, dc):
        for b in p.gen_batches:
            if tp > p.gpus_per_node or not gen_batch_fits(p, tp, b, a):
                continue
            step = dc.step_ms(tp, b, kv_mid, a, e) * 1e-3
            n = 1 if math.isnan(out_rate) else max(1, math.ceil(out_rate / (tp // a * b / step)))
            d = replace(ctx, gen_tp=tp, gen_servers=n, gen_batch=b, gen_attn_tp=a, gen_moe_tp=e)
            p.tick(f"Pareto {ctx.mode.upper()}: {n} x {tp} GPUs, batch {b}")
            m = p.summarize(run_deployment(p, d, dc)[0], d.gpus, free)
            shape = f" {d.gen_shape()}" if d.gen_shape() else ""
            pts.append((m.tps_user, m.output_tps_per_gpu, f"{d.gpus} GPUs: {d.ctx_short()} + {n}x{tp}{shape} b{b}"))
    return pts
