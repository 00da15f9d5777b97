"""Copies under concurrent compute, per phase: rank 0 computes one phase's kernel while it pulls from rank 1 (a
real peer copy: a same-device copy never counts, perf/uncertainty.py), against each alone.

Phases (perf/calibration_detail.PHASES, the planner's interference phases): attention_core (the floor's causal
attention kernel), gemm (a dense MLP's down projection), memory_bound (an elementwise add over buffers far larger
than L2), grouped_gemm (the routed experts' grouped GEMMs). A short kernel is repeated, and a long one gets a longer
pull, until compute and pull alone last about as long, so the two overlap for most of either; interference = compute time beside the pull / alone, and
copy slowdown = pull time beside the compute / alone.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from .copy_timer import CopyTimer, pull_plan

#: bytes of each operand of the memory-bound phase (three of them: far beyond any L2)
MEMORY_BOUND_BYTES = 256 << 20
#: the longest pull put beside one compute call
MAX_PULL_BYTES = 8 << 30


def memory_bound_fn(device: torch.device, nbytes: int = MEMORY_BOUND_BYTES) -> Callable[[], None]:
    """An elementwise add over `nbytes` operands (bandwidth-bound like norms, activations and the combine)."""
    n = nbytes // 2
    g = torch.Generator(device=device).manual_seed(0)
    x, y = (torch.randn(n, generator=g, device=device).to(torch.bfloat16) for _ in range(2))
    z = torch.empty_like(x)
    return lambda: torch.add(x, y, out=z)


def phase_interference(timer: CopyTimer, compute: Callable[[], None], pull_bytes: int, slice_bytes: int,
                       max_bytes: int = MAX_PULL_BYTES) -> tuple[float, float]:
    """(compute slowdown, copy slowdown) of `compute` on rank 0 beside rank 0 pulling from rank 1: at least
    `pull_bytes`, more (up to `max_bytes`) when one compute call outlasts that pull, so the two overlap."""
    job = [(0, pull_plan(pull_bytes, 1, slice_bytes, 0))]
    copy_alone = timer.time_pulls(job)[0]
    one = timer.time_compute(0, compute, 1)
    if one > copy_alone:  # a long kernel: a longer pull beside it, in whole slices
        step = slice_bytes or pull_bytes
        nbytes = min(max(max_bytes, pull_bytes), math.ceil(pull_bytes * one / copy_alone / step) * step)
        job = [(0, pull_plan(nbytes, 1, slice_bytes, 0))]
        copy_alone = timer.time_pulls(job)[0]
    calls = max(1, round(copy_alone / max(one, 1e-6)))
    compute_alone = timer.time_compute(0, compute, calls)
    copy_ms, compute_ms = timer.time_with_compute(job, compute, calls)
    return compute_ms / compute_alone, copy_ms[0] / copy_alone


def interference_by_phase(timer: CopyTimer, phases: dict[str, Callable[[], None]], pull_bytes: int,
                          slice_bytes: int, max_bytes: int = MAX_PULL_BYTES) -> tuple[dict[str, float], dict[str, float]]:
    """({phase: compute slowdown}, {phase: copy slowdown}) for every phase closure given; each at least 1 (copies
    beside compute do not speed either up: a reading below 1 is timing noise, written as 1)."""
    comp, copy = {}, {}
    for name, fn in phases.items():
        c, k = phase_interference(timer, fn, pull_bytes, slice_bytes, max_bytes)
        comp[name], copy[name] = max(c, 1.0), max(k, 1.0)
    return comp, copy
