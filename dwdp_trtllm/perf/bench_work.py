"""The work of a `dwdp bench` run's measured iterations, rebuilt from its config (pure, no torch).

The bench is deterministic where it matters here: every rank's queue comes from WorkloadConfig.seed
(bench/workload.py) and is batched by the engine's FCFS chunked-prefill scheduler (the core's batching.py)
up to max_num_tokens per iteration; with offline arrivals (every request at t = 0) the batches do not
depend on timing. Rebuilding them gives the planner the same iterations the bench measured: tokens,
keys (prefix + chunk, which MLA's kv_b projection runs over), the causal attention core's FLOPs and the
number of segments (attention calls) of every (measured iteration, rank).

Layout: S = measured iteration index (DEP ranks run in lock-step: a rank that has run out runs an empty
iteration; DWDP ranks free-run and are padded with empty iterations to the longest rank), R = rank.
Attention numbers are per layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec.models import PRESETS, ModelSpec, get_model
from .flops import attention_proj_flops, core_flops, dense_mlp_flops, routed_expert_flops, shared_and_router_flops


@dataclass(frozen=True)
class IterationLoad:
    """One iteration's attention work per (sample, rank), what the cost model needs (arrays [S, R])."""

    tokens_SR: np.ndarray  # tokens (queries) of the iteration
    kv_tokens_SR: np.ndarray  # prefix + chunk keys summed over segments (MLA kv_b runs over them)
    core_flops_SR: np.ndarray  # causal attention core FLOPs per layer (2 per MAC)
    segments_SR: np.ndarray  # attention segments (one call each) per layer

    def at(self, s: int) -> "IterationLoad":
        """Sample (iteration) `s` alone."""
        return IterationLoad(self.tokens_SR[s:s + 1], self.kv_tokens_SR[s:s + 1], self.core_flops_SR[s:s + 1],
                             self.segments_SR[s:s + 1])


def run_model(cfg: dict) -> ModelSpec:
    """The ModelSpec a bench run's config built (preset, num_layers, first_k_dense; checkpoint: its config.json)."""
    m = cfg.get("model") or {}
    if m.get("checkpoint"):
        from ..spec.config import ModelConfig
        return ModelConfig(checkpoint=m["checkpoint"], num_layers=m.get("num_layers"),
                           first_k_dense=m.get("first_k_dense")).spec()
    preset = m.get("preset") or "tiny"  # null: ModelConfig's default
    if preset not in PRESETS:
        raise ValueError(f"config.model.preset {preset!r} is not a known preset")
    return get_model(preset, m.get("num_layers"), m.get("first_k_dense"))


def rebuild(cfg: dict, spec: ModelSpec) -> tuple[IterationLoad | None, str]:
    """The measured iterations of a bench run with config `cfg` (a results.json run's "config"), or
    (None, why) where they cannot be rebuilt (Poisson arrivals depend on timing; unreadable workload)."""
    from ..spec.batching import RankScheduler
    from ..spec.workload import generate_requests
    from ..spec.config import WorkloadConfig
    from ..spec.schema import ConfigError, from_dict

    run = cfg.get("run") or {}
    try:
        wl = from_dict(WorkloadConfig, cfg.get("workload") or {}, prefix="workload")
    except (ConfigError, TypeError, ValueError) as e:
        return None, f"workload not readable ({e})"
    if wl.arrival != "offline":
        return None, f"{wl.arrival} arrivals: the batches depend on timing"
    ranks, warmup = int(run.get("ranks", 1)), int(run.get("warmup_iters", 0))
    lockstep = "dep" in (run.get("modes") or ()) and ranks > 1
    per_rank = []
    for queue in generate_requests(wl, ranks):
        sched, its = RankScheduler(queue, wl.max_num_tokens), []
        while (batch := sched.next_batch(math.inf)) is not None:
            its.append([(s.start, s.length) for s in batch])
        per_rank.append(its)
    S = max(len(its) for its in per_rank) - warmup
    if S <= 0:
        return None, f"run.warmup_iters={warmup} leaves no measured iteration"
    shape = (S, ranks)
    tok, kv, core, seg = (np.zeros(shape) for _ in range(4))
    for r, its in enumerate(per_rank):
        for i, segs in enumerate(its[warmup:]):
            tok[i, r] = sum(n for _, n in segs)
            kv[i, r] = sum(p + n for p, n in segs)
            core[i, r] = sum(float(core_flops(spec, n, p)) for p, n in segs)
            seg[i, r] = len(segs)
    why = "DEP lock-step" if lockstep else "ranks padded to the longest with empty iterations" if ranks > 1 else ""
    return IterationLoad(tok, kv, core, seg), why


def floor_flops(spec: ModelSpec, load: IterationLoad) -> dict[str, float]:
    """Per-iteration FLOPs of the floor's phases, mean over the iterations that processed tokens (one rank's
    DWDP/reference view: every routed pair of its own tokens), as bench/floor.py reports them."""
    busy = load.tokens_SR > 0
    L, n = spec.num_layers, spec.num_moe_layers
    t, kv = load.tokens_SR[busy], load.kv_tokens_SR[busy]
    return {"attention_proj": float(np.mean(attention_proj_flops(spec, t, kv))) * L,
            "attention_core": float(np.mean(load.core_flops_SR[busy])) * L,
            "expert_gemm": float(np.mean(routed_expert_flops(spec, t))) * n,
            "other": float(np.mean(dense_mlp_flops(spec, t) * spec.first_k_dense + shared_and_router_flops(spec, t) * n))}


def get(d: Any, path: str, default: Any = None) -> Any:
    """d["a"]["b"] for path "a.b", or default where a key is missing."""
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d
