"""What a rank reports after a benchmark run (plain data, picklable across processes).

Times are host seconds on time.perf_counter() (CLOCK_MONOTONIC: one clock for every process on a
machine), so per-rank timelines line up. GPU phases are measured with CUDA events and mapped onto
that clock at the end of each iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.batching import Request, Segment  # noqa: F401  the core's (batching.py batches them); re-exported here

#: phase names used in IterationRecord.phases
PHASES = ("attention", "expert_gemm", "other", "all_to_all", "sync_wait", "prefetch_wait", "copy")


@dataclass
class IterationRecord:
    """One forward pass of one rank."""

    rank: int
    iteration: int
    t_start: float
    t_end: float
    num_tokens: int
    segments: list[Segment]
    warmup: bool
    # (phase, layer index, start_s, end_s); phase in PHASES; layer -1 for whole-iteration phases
    phases: list[tuple[str, int, float, float]] = field(default_factory=list)
    # routed (token, expert) pairs per expert of every MoE layer: [MoE layer][expert] (the floor's routing)
    expert_counts: list[list[int]] | None = None


@dataclass
class RankResult:
    """Everything one rank measured for one mode."""

    rank: int
    mode: str
    device: str
    t0: float  # run start on the shared clock; Request.arrival_s is relative to it
    requests: list[Request]
    iterations: list[IterationRecord]
    first_token_s: dict[int, float]  # request_id -> absolute time its last chunk finished
    memory_bytes: dict[str, int]  # weights, prefetch_slots, activations, peak_total
    copy_bytes: int = 0  # bytes this rank pulled from peers (DWDP)
    extra: dict = field(default_factory=dict)
