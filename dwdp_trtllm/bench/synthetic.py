"""A synthetic stand-in for engine.launcher.run_mode: simulated times, NOT measurements.

It batches each rank's queue with the real RankScheduler and models per-layer time with a simple cost
model, so it produces RankResults of the exact shape the engine returns, with the effects the bench
reports (DEP ranks waiting for the slowest at every layer, DWDP copies overlapping compute). Tests
and dry runs of the bench pipeline use it; its numbers say nothing about real hardware.

Cost model per layer of one iteration (seconds): attention = ATTN_S * sum over segments of
length * (start + length / 2) (quadratic in context) + OTHER_S * tokens; expert GEMM = GEMM_S * tokens
(DEP: mean tokens over ranks, since experts are sharded); DEP adds A2A_S * tokens all-to-all after
waiting for the slowest rank's attention; DWDP pulls the next layer's experts in COPY_S on a copy lane
started with the layer, and its MoE waits for that copy (prefetch_wait).
"""
from __future__ import annotations

from typing import Callable

from ..spec.config import BenchConfig
from ..engine.records import IterationRecord, RankResult, Request, Segment
from ..spec.batching import RankScheduler

ATTN_S, OTHER_S, GEMM_S, A2A_S, COPY_S = 2e-9, 2e-7, 1e-6, 3e-7, 1.2e-4
T0 = 1000.0  # an arbitrary shared-clock origin, so consumers cannot assume t0 == 0


def _attn_s(segs: list[Segment]) -> float:
    return sum(ATTN_S * s.length * (s.start + s.length / 2) + OTHER_S * s.length for s in segs)


def synthetic_run_mode(cfg: BenchConfig, mode: str, requests_per_rank: list[list[Request]], *,
                       progress: Callable[[int, int, int], None] | None = None,
                       popularity_LE=None) -> list[RankResult]:
    """Same contract as engine.launcher.run_mode, simulated (see the module doc); popularity_LE (a routing skew's
    table) is accepted and not modelled: the cost model has no routing."""
    if mode not in ("dep", "dwdp", "reference"):
        raise ValueError(f"mode: expected dep, dwdp or reference, got {mode!r}")
    ranks = cfg.run.ranks
    if len(requests_per_rank) != ranks:
        raise ValueError(f"requests_per_rank has {len(requests_per_rank)} queues for {ranks} ranks")
    layers = cfg.model.spec().num_layers
    scheds = [RankScheduler(q, cfg.workload.max_num_tokens) for q in requests_per_rank]
    clock = [0.0] * ranks  # seconds after T0
    iters: list[list[IterationRecord]] = [[] for _ in range(ranks)]
    first: list[dict[int, float]] = [{} for _ in range(ranks)]

    def run_iteration(r: int, segs: list[Segment], start: float, layer_ends: list[float] | None) -> float:
        t, phases = start, []
        tok = sum(s.length for s in segs)
        for layer in range(layers):
            a = _attn_s(segs)
            phases.append(("attention", layer, T0 + t, T0 + t + a))
            if mode == "dep":
                ready = layer_ends[layer]
                phases.append(("sync_wait", layer, T0 + t + a, T0 + ready))
                a2a = A2A_S * tok
                phases.append(("all_to_all", layer, T0 + ready, T0 + ready + a2a))
                g0 = ready + a2a
                g = GEMM_S * mean_tok
            else:
                g0, g = t + a, GEMM_S * tok
                if mode == "dwdp":
                    phases.append(("copy", layer, T0 + t, T0 + t + COPY_S))
                    if t + COPY_S > g0:
                        phases.append(("prefetch_wait", layer, T0 + g0, T0 + t + COPY_S))
                        g0 = t + COPY_S
            phases.append(("expert_gemm", layer, T0 + g0, T0 + g0 + g))
            t = g0 + g
        n = len(iters[r])
        iters[r].append(IterationRecord(rank=r, iteration=n, t_start=T0 + start, t_end=T0 + t, num_tokens=tok,
                                        segments=segs, warmup=n < cfg.run.warmup_iters, phases=phases))
        for s in segs:
            if s.is_last:
                first[r][s.request_id] = T0 + t
        if progress is not None:
            progress(r, len(first[r]), len(requests_per_rank[r]))
        return t

    if mode == "dep":
        while not all(s.done() for s in scheds):
            now = max(clock)
            batches = [s.next_batch(now) or [] for s in scheds]
            if not any(batches):  # nobody has arrived work: everyone jumps to the next arrival
                clock = [min(a for s in scheds if (a := s.next_arrival_s()) is not None)] * ranks
                continue
            mean_tok = sum(sum(g.length for g in b) for b in batches) / ranks
            # layer-by-layer lockstep: each layer's all-to-all starts when the slowest rank's attention ends
            ends, t_layer = [], now
            for _ in range(layers):
                ready = max(t_layer + _attn_s(b) for b in batches)
                t_layer = ready + A2A_S * max(sum(g.length for g in b) for b in batches) + GEMM_S * mean_tok
                ends.append(ready)
            clock = [run_iteration(r, batches[r], now, ends) for r in range(ranks)]
            clock = [max(clock)] * ranks
    else:
        mean_tok = 0.0
        for r in range(ranks):
            while (segs := scheds[r].next_batch(clock[r])) is not None:
                if not segs:
                    clock[r] = scheds[r].next_arrival_s()  # type: ignore[assignment]
                    continue
                clock[r] = run_iteration(r, segs, clock[r], None)

    mem = {"weights": 1 << 20, "prefetch_slots": (1 << 18) if mode == "dwdp" else 0, "activations": 1 << 16}
    mem["peak_total"] = sum(mem.values())
    return [RankResult(rank=r, mode=mode, device=cfg.run.device, t0=T0, requests=list(requests_per_rank[r]),
                       iterations=iters[r], first_token_s=first[r], memory_bytes=dict(mem),
                       copy_bytes=4096 * len(iters[r]) if mode == "dwdp" else 0, extra={"synthetic": True})
            for r in range(ranks)]
