"""Arguments every deployment command shares (plan-placement, gen-config): the GPU and its memory budget.

The defaults themselves (model, GPU, weight dtype, tokens) live in memory.py (DEFAULT_*), so `dwdp plan` reads
the same ones; the budget is in GB (1e9 bytes), the unit of memory.py.
"""
from __future__ import annotations

import math

from ..deploy import memory as mem
from ..spec.schema import ConfigError


def add_gpu_args(p, *, what: str = "every rank") -> None:
    p.add_argument("--gpu", "--gpu-spec", dest="gpu", default=mem.DEFAULT_GPU, metavar="GPU",
                   help=f"GPU of {what}: a shipped name (h100 | h200 | b200 | gb200 | mi355x) or a GPU spec file "
                        f"(YAML, docs/PLANNER.md 'GPU spec files', as `dwdp plan --gpu-spec`); its memory is the "
                        f"budget (default {mem.DEFAULT_GPU})")
    p.add_argument("--gpu-memory-gb", type=float, default=None,
                   help="usable memory per GPU in GB (1e9 bytes; default: the --gpu datasheet's)")


def gpu_budget_bytes(gpu=mem.DEFAULT_GPU, gpu_memory_gb: float | None = None) -> int:
    """Bytes per GPU: --gpu-memory-gb (GB) if given, else the --gpu datasheet's memory (gpu: a name, a spec file's
    path or a loaded GpuSpec); errors name the flag."""
    if gpu_memory_gb is not None:
        if not (math.isfinite(gpu_memory_gb) and 0 < gpu_memory_gb < 1e5):
            raise ConfigError(None, "--gpu-memory-gb", f"expected a finite number of GB in (0, 1e5), got {gpu_memory_gb}")
        return int(gpu_memory_gb * mem.GB)
    from ..perf import get_gpu
    try:
        return int((gpu if hasattr(gpu, "memory_gb") else get_gpu(gpu)).memory_gb * mem.GB)
    except ValueError as e:
        raise ConfigError(None, "--gpu", str(e)) from None


def gpu_label(gpu: str) -> str:
    """The GPU's name as the outputs show it: a shipped name as given, a spec file by the name it declares."""
    from ..perf.hardware import get_gpu, is_spec_path

    return get_gpu(gpu).name if is_spec_path(gpu) else gpu
