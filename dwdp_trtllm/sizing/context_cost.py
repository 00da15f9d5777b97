"""The time of one context-server iteration, from the planner (pure; perf/planner.iteration_times).

A context iteration is a list of segments per rank (request chunks: length after a prefix). The planner prices
it as `dwdp plan` prices its sampled iterations (TensorRT-LLM's kernel tables by default): tokens, keys, the causal
attention core's FLOPs and the segment count per rank, the attention tables read at the iteration's mean request
length. DWDP: one rank, its compute overlapped with the prefetch of its group's experts. DEP: the group's ranks in
lock-step, the slowest rank's own work + the shared experts and all-to-all.

Two options model what a deployment runs besides the trunk (off by default):
- `mtp_prompt`: the context server runs TensorRT-LLM's one-model MTP (`speculative_config` MTP, as upstream's
  examples/dwdp/reproduce.py @ 1f939488 `build_worker_config` sets on its context servers): with DeepSeek's one
  checkpoint MTP layer (MTP_EAGLE), `MTPEagleWorker.forward` (tensorrt_llm/_torch/speculative/mtp.py) runs that
  layer once over every token of the iteration (its later draft passes are one token per request: not priced).
  Priced as one more MoE layer of the model (attention + MoE, and for DWDP that layer's expert pull).
- `kv_contention`: a DWDP rank sends its requests' KV cache to the generation servers over the same NVLink it
  serves its peers' expert pulls from; in steady state an iteration sends the KV of as many tokens as it runs, so
  those bytes (deploy/memory.py `kv_cache_floor_bytes`, bf16 as the KV transfer is priced: the recipe's fp8
  cache sends half), spread over the MoE layers, are added to the bytes the
  rank serves per layer (cost_model.prefetch_us). DEP has no pulls to contend with.

The simulator asks for thousands of iterations; prices are cached on the iteration's shape rounded to
ROUND_TOKENS tokens per rank and 1/64 of a doubling of the attention FLOPs and request length (well under 1% of an
iteration's time; tests/unit/test_sizing_sim.py checks the cached price against an uncached one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..deploy.memory import kv_cache_floor_bytes
from ..perf.bench_work import IterationLoad
from ..perf.flops import core_flops
from ..perf.planner import iteration_times
from ..perf.plan_spec import PlanSpec

ROUND_TOKENS = 32
_LOG_STEPS = 64  # cache bins per doubling of FLOPs and request length


def _bin(x: float) -> int:
    return int(round(math.log2(max(x, 1.0)) * _LOG_STEPS))


@dataclass(frozen=True)
class Segments:
    """One rank's part of an iteration: (prefix, length, isl) of every request chunk it runs."""

    parts: tuple[tuple[int, int, int], ...]

    @property
    def tokens(self) -> int:
        return sum(n for _, n, _ in self.parts)


@dataclass
class ContextCost:
    """Iteration prices of one context-server shape: mode (dwdp / dep), group size, redundancy, slice bytes, the
    uncertainty scenario (`which`: nominal / low / high, perf/uncertainty.py)."""

    spec: PlanSpec
    mode: str
    group: int
    redundant: int = 0
    slice_bytes: int = 2 << 20
    which: str = "nominal"
    variant: str = "trtllm"  # the DEP priced (perf/dep_variants.py; `--dep`)
    _cache: dict = field(default_factory=dict, repr=False)
    prefetch_bound: int = 0  # DWDP iterations whose exposed prefetch set the time (binding constraint)
    iterations: int = 0
    comm_s: float = 0.0  # DEP: time in dispatch/combine (binding constraint)
    mtp_prompt: bool = False  # the MTP layer runs over the prompt (module docstring)
    kv_contention: bool = False  # DWDP: the KV transfer shares the rank's links with its expert pulls

    def __post_init__(self) -> None:
        m = self.spec.model
        if self.mtp_prompt:  # one more MoE layer over every token (module docstring)
            self.spec = replace(self.spec, model=replace(m, num_layers=m.num_layers + 1))

    def _load(self, ranks: list[Segments]) -> tuple[IterationLoad, float]:
        m = self.spec.model
        tok = np.array([[r.tokens for r in ranks]], float)
        kv = np.array([[sum(p + n for p, n, _ in r.parts) for r in ranks]], float)
        core = np.array([[sum(float(core_flops(m, n, p)) for p, n, _ in r.parts) for r in ranks]])
        seg = np.array([[len(r.parts) for r in ranks]], float)
        lens = [(isl, n) for r in ranks for _, n, isl in r.parts]
        isl = sum(i * n for i, n in lens) / max(1, sum(n for _, n in lens))
        return IterationLoad(tok, kv, core, seg), isl

    def seconds(self, ranks: list[Segments]) -> float:
        """The iteration's time (s): DWDP one rank (`ranks` of length 1), DEP the lock-step group."""
        load, isl = self._load(ranks)
        key = (tuple(int(round(t / ROUND_TOKENS)) for t in load.tokens_SR[0]),
               tuple(_bin(c) for c in load.core_flops_SR[0]), tuple(int(s) for s in load.segments_SR[0]), _bin(isl))
        hit = self._cache.get(key)
        if hit is None:
            extra = 0.0
            if self.kv_contention and self.mode == "dwdp":
                m = self.spec.model
                extra = kv_cache_floor_bytes(m, int(load.tokens_SR.sum())) / m.num_moe_layers
            it = iteration_times(self.spec, load, self.group, self.redundant, self.slice_bytes, isl, self.which,
                                 self.variant, extra)
            if self.mode == "dwdp":
                hit = (float(it.dwdp_SR[0, 0]) * 1e-6, bool(it.dwdp_prefetch_bound_SR[0, 0]), 0.0)
            else:
                hit = (float(it.dep_S[0]) * 1e-6, False, float(it.dep_comm_S[0]) * 1e-6)
            self._cache[key] = hit
        self.iterations += 1
        self.prefetch_bound += hit[1]
        self.comm_s += hit[2]
        return hit[0]
