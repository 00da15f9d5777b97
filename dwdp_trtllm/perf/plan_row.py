"""One row of a plan: one configuration at one ISL against one DEP variant, nominal and ranged (pure data)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


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
    target: str = "engine"  # what the compute was priced for (PlanSpec.priced_as)
    speedup_low: float = 0.0  # every uncertain input at DWDP's worse end (perf/uncertainty.py)
    speedup_high: float = 0.0  # ... at its better end
    t_dep_us_range: tuple = ()  # (low scenario, high scenario)
    t_dwdp_us_range: tuple = ()
    depends_on: str = ""  # the input whose worse end alone moves the speedup most
    break_even_tokens: float = 0.0  # tokens per rank per iteration (requests of this ISL) whose compute hides the prefetch
    break_even_range: tuple = ()  # (fewest, most) over the scenarios (less interference needs more tokens to hide)
    extrapolated: dict = None  # phase -> how far past its kernel table (e.g. "8x past the last row")
    routing_skew: str = "none"
    verdict: str = ""  # DWDP | DEP | marginal from the range at this ISL, or nothing fits (recommend.row_verdict)
    local_experts: int = 0  # routed experts per layer the worst rank holds (placement, redundancy included)
    dep_fits: bool = True  # DEP at the same G fits the budget (memory_dep_gb)
    dep_comm: str = ""  # DEP's communication path and how it was priced (phases.Phases.comm_source)
    t_iteration_dep_us: float = 0.0  # whole model, one mean iteration (dense + MoE layers): tps_per_gpu_dep's time
    t_iteration_dwdp_us: float = 0.0
    dep_variant: str = "trtllm"  # which DEP this row compares against (perf/dep_variants.VARIANTS)

    def to_dict(self) -> dict:
        """JSON-ready: floats rounded, a non-finite one (break-even never reached) as None."""
        def one(v):
            if isinstance(v, float):
                return round(v, 6) if math.isfinite(v) else None
            return [one(x) for x in v] if isinstance(v, (tuple, list)) else v
        return {k: one(v) for k, v in asdict(self).items()}
