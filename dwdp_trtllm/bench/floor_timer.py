"""FloorTimer: times the floor's kernels (bench/floor_kernels.py's closures; bench/floor.py's module docstring says
which) alone on one device, CUDA events on GPU (median of `reps` after `warmup` calls), and sums one iteration's
floor per phase (iteration_ms) and its FLOPs (iteration_flops). Every timed call group's host span is kept in
`windows`, so the burst floor's clock samples can be cut to them (bench/gpu_clocks.clock_stats).

Shape legend: T tokens of the iteration, S keys (cached prefixes included).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..spec.models import ModelSpec
from ..perf.flops import attention_proj_flops, core_flops, dense_mlp_flops, expert_rows_flops, shared_and_router_flops
from .floor_kernels import FloorKernels


@dataclass(frozen=True)
class Batch:
    """One iteration's work as the floor sees it: (prefix, length) per segment and the expert rows per MoE layer."""

    segments: tuple[tuple[int, int], ...]
    rows_per_expert: tuple[tuple[int, ...], ...]  # [MoE layer][expert]

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.segments)


class FloorTimer(FloorKernels):
    """Times the floor's kernels (bench/floor.py's module docstring: stock ones and the engine's one-pass passes)
    alone on one device; buffers are allocated once per shape and reused (FloorKernels)."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, weight_dtype: str, device: torch.device, *,
                 warmup: int = 2, reps: int = 5, fp8_linear: bool = False):
        super().__init__(spec, dtype, weight_dtype, device, fp8_linear=fp8_linear)
        self.warmup, self.reps = warmup, reps
        self._core_pick: dict[tuple, int] = {}  # segments -> index of attention_core_fns found fastest
        #: (start, end) on perf_counter of every timed call group of time_ms (its warm-up excluded): the clock
        #: samples of the burst floor are cut to these (gpu_clocks.clock_stats windows)
        self.windows: list[tuple[float, float]] = []

    # ---- timing -------------------------------------------------------------------------------------
    def time_ms(self, fn) -> float:
        """Median milliseconds of fn() (CUDA events on GPU, perf_counter on CPU); the timed calls' host span is
        appended to `windows`."""
        cuda = self.device.type == "cuda"
        for _ in range(self.warmup):
            fn()
        if cuda:  # the warm-up done: the window holds the timed calls only (events time them as before)
            torch.cuda.synchronize(self.device)
        samples = []
        t_start = time.perf_counter()
        for _ in range(self.reps):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                samples.append(a.elapsed_time(b))
            else:
                t = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t) * 1e3)
        self.windows.append((t_start, time.perf_counter()))  # on CUDA each rep ends synchronised: its kernels ran inside
        return statistics.median(samples)

    def _timed(self, fn) -> float:
        """time_ms of a kernel closure; 0 for no work (None)."""
        return 0.0 if fn is None else self.time_ms(fn)

    # Every `*_ms` times the closure of its `*_fn` (FloorKernels) alone: the burst floor.
    def gemm_ms(self, m: int, n: int, k: int) -> float:
        return self._timed(self.gemm_fn(m, n, k))

    def linear_ms(self, m: int, n: int, k: int) -> float:
        if not self.fp8_linear:
            return self.gemm_ms(m, n, k)  # through the (memoised) gemm_ms, as before the closures
        return self._timed(self.linear_fn(m, n, k))

    def op_ms(self, op: str, m: int, n: int, k: int) -> float:
        return (self.gemm_ms if op == "gemm" else self.linear_ms)(m, n, k)

    # ---- attention ----------------------------------------------------------------------------------
    def attention_core_ms(self, segments: tuple[tuple[int, int], ...]) -> float:
        """The fastest of attention_core_fns timed alone; which one is kept for attention_core_fn."""
        fns = self.attention_core_fns(segments)
        times = [self.time_ms(fn) for fn in fns]
        best = min(range(len(fns)), key=times.__getitem__)
        self._core_pick[segments] = best
        return times[best]

    def attention_core_fn(self, segments: tuple[tuple[int, int], ...]):
        """The closure attention_core_ms found fastest for these segments (timed first if it was not)."""
        if segments not in self._core_pick:
            self.attention_core_ms(segments)
        return self.attention_core_fns(segments)[self._core_pick[segments]]

    def attention_passes_ms(self, T: int, S: int) -> float:
        return self._timed(self.attention_passes_fn(T, S))

    def attention_layer_ms(self, segments: tuple[tuple[int, int], ...]) -> dict[str, float]:
        T, S = sum(n for _, n in segments), sum(p + n for p, n in segments)
        proj = sum(self.op_ms(*g) for g in self.attention_proj_gemms(T, S))
        return {"projections": proj, "core": self.attention_core_ms(segments), "passes": self.attention_passes_ms(T, S)}

    # ---- experts and MLPs ---------------------------------------------------------------------------
    def grouped_ms(self, rows_per_expert: tuple[int, ...]) -> float:
        return self._timed(self.grouped_fn(rows_per_expert))

    def moe_other_ms(self, T: int) -> float:
        return sum(self.op_ms(*g) for g in self.moe_other_gemms(T))

    def dense_mlp_ms(self, T: int) -> float:
        return sum(self.op_ms(*g) for g in self.dense_mlp_gemms(T))

    # ---- one iteration ------------------------------------------------------------------------------
    def iteration_ms(self, batch: Batch) -> dict[str, float]:
        """{"attention", "expert_gemm", "other", "total"}: floor ms of one iteration (all layers); attention includes
        "attention_core" and "attention_passes", also given apart."""
        sp = self.spec
        T = batch.tokens
        att = self.attention_layer_ms(batch.segments)
        attention = (att["projections"] + att["core"] + att["passes"]) * sp.num_layers
        experts = sum(self.grouped_ms(r) for r in batch.rows_per_expert)
        other = self.dense_mlp_ms(T) * sp.first_k_dense + self.moe_other_ms(T) * sp.num_moe_layers
        return {"attention": attention, "attention_core": att["core"] * sp.num_layers,
                "attention_passes": att["passes"] * sp.num_layers, "expert_gemm": experts,
                "other": other, "total": attention + experts + other}

    def iteration_flops(self, batch: Batch) -> dict[str, float]:
        """FLOPs (2 per MAC) of the floor's phases for one iteration, counted by perf/flops.py (the counts the
        planner prices): attention (projections, MLA's kv_b over prefix + chunk keys, + causal core), expert_gemm
        (the routed rows), other (dense MLP, router, shared)."""
        sp = self.spec
        T, S = batch.tokens, sum(p + n for p, n in batch.segments)
        proj = float(attention_proj_flops(sp, T, S))
        core = sum(float(core_flops(sp, n, p)) for p, n in batch.segments)
        rows = sum(sum(r) for r in batch.rows_per_expert)
        other = float(dense_mlp_flops(sp, T)) * sp.first_k_dense + float(shared_and_router_flops(sp, T)) * sp.num_moe_layers
        return {"attention": (proj + core) * sp.num_layers, "expert_gemm": float(expert_rows_flops(sp, rows)),
                "other": other, "attention_proj": proj * sp.num_layers, "attention_core": core * sp.num_layers}
