"""What a `dwdp calibrate --device cpu` run takes before it starts, computed from the work its steps do, and whether
this machine can finish it: the functional check runs the real pipeline at the model's real shapes, so a large
model's MoE layer is GBs of host memory filled with random data (bench/floor_kernels.FloorKernels._buf) and
copied between logical ranks that all live in this one process (calibrate/copy_timer.SchedulerCopyTimer).

- `cpu_footprint`: the most bytes one step holds at once (the whole-group pull: every rank's source and destination
  buffers of one MoE layer, pipeline.plan_steps' contention step) and the bytes the run fills with fresh data at
  least (the kernel step's and the interference step's expert weights, the group pull's buffers); both lower bounds.
- `fill_rate`: bytes per second this machine fills fresh memory with random bf16 now (a short probe, as _buf fills).
- `cpu_refusal`: why the run cannot finish here (the bytes and RESERVE_BYTES do not fit what the host has available,
  or the fill alone takes longer than CPU_LIMIT_S), or None. The models that fit are computed by the same test over
  the presets.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..byte_units import fmt_bytes
from ..core.expert_buffers import expert_layout
from ..spec.models import ModelSpec

#: the longest a CPU functional check may take (its fill alone): past it the run is refused up front
CPU_LIMIT_S = 600.0
#: host bytes the run needs beside its buffers: this process's Python and torch, the fill's fp32 temporaries (256 MiB
#: drawn at a time, FloorKernels._buf) and the activations
RESERVE_BYTES = 2 << 30
#: bytes the fill-rate probe writes (large enough to leave the caches, small enough to take well under a second)
PROBE_BYTES = 32 << 20


@dataclass(frozen=True)
class Footprint:
    """Lower bounds of a CPU run: `peak_bytes` held at once, `filled_bytes` filled fresh; `layer_bytes`: one MoE
    layer's routed experts at bf16 (what both scale with)."""

    layer_bytes: int
    peak_bytes: int
    filled_bytes: int
    ranks: int


def cpu_footprint(spec: ModelSpec, ranks: int) -> Footprint:
    """`ranks` logical ranks on the CPU (bf16: the CPU has no FP8 kernels). The kernel step fills one layer's experts
    (FloorTimer: w13 and w2 of every expert); the whole-group pull gives each rank a source buffer of its local
    experts and a destination of the ones it pulls (ranks x layer in all, held together); the interference step
    fills the layer's experts again."""
    layer = spec.num_experts * sum(expert_layout(spec, "bf16").tensor_bytes)
    group = layer * ranks if ranks > 1 else 0
    return Footprint(layer, max(layer, group), 2 * layer + group if ranks > 1 else layer, ranks)


def fill_rate(nbytes: int = PROBE_BYTES) -> float:
    """Bytes per second this process fills fresh memory with random bf16 now (allocation, first touch and the
    generator, as FloorKernels._buf does)."""
    import torch

    t0 = time.perf_counter()
    buf = torch.empty(nbytes // 2, dtype=torch.bfloat16)
    buf.copy_(torch.randn(buf.shape) * 0.05)
    took = time.perf_counter() - t0
    del buf
    return nbytes / max(took, 1e-9)


def seconds(fp: Footprint, bps: float) -> float:
    """The fill's time at `bps` (a lower bound of the run's)."""
    return fp.filled_bytes / bps


def feasible(fp: Footprint, available: int | None, bps: float, limit_s: float = CPU_LIMIT_S) -> bool:
    return (available is None or fp.peak_bytes + RESERVE_BYTES <= available) and seconds(fp, bps) <= limit_s


def duration(s: float) -> str:
    """A run's length as a user reads it ('under a second', '42 s', '19 min')."""
    return "under a second" if s < 1 else f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def size(nbytes: float) -> str:
    return fmt_bytes(nbytes, "GB" if nbytes >= 1e9 else "MiB", digits=2 if nbytes >= 1e9 else 1)


def cpu_refusal(spec: ModelSpec, ranks: int, available: int | None, why_available: str, bps: float,
                presets: dict[str, ModelSpec], limit_s: float = CPU_LIMIT_S) -> str | None:
    """None when `ranks` CPU ranks can run `spec` here; else what it would take, what this machine has, and the
    presets that fit (the same test)."""
    fp = cpu_footprint(spec, ranks)
    if feasible(fp, available, bps, limit_s):
        return None
    took = seconds(fp, bps)
    need = (f"{spec.name} on --device cpu holds at least {size(fp.peak_bytes)} at once ({ranks} logical "
            f"rank(s) sharing one MoE layer of {size(fp.layer_bytes)}, bf16) and fills at least "
            f"{size(fp.filled_bytes)}: about {duration(took)} at the {size(bps)}/s measured here")
    have = []
    if available is not None and fp.peak_bytes + RESERVE_BYTES > available:
        have.append(f"{size(available)} available ({why_available}), {size(RESERVE_BYTES)} of it for the process "
                    "itself")
    if took > limit_s:
        have.append(f"a CPU functional check is limited to {duration(limit_s)}")
    fits = sorted(n for n, s in presets.items() if feasible(cpu_footprint(s, ranks), available, bps, limit_s))
    return (f"{need}; {' and '.join(have)}; on the CPU use a model that fits: {', '.join(fits) or 'none here'} "
            "(a calibration measures the GPUs: --device cuda)")
