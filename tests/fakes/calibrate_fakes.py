"""Fakes of `dwdp calibrate`'s tools (dwdp_trtllm/calibrate/pipeline.Tools) for a multi-GPU node on the CPU: times
come from a small model with known constants, so the tests can check that each number reaches the file as the
measurement functions define it. They mirror this package's own interfaces (calibrate/copy_timer.CopyTimer,
bench/floor_timer.FloorTimer, calibrate/dep_comm.A2aTimer), no upstream code.

Copy model (ms): a job pulls bytes_s from each source s; a source pulled by n_s jobs at once gives each 1/n_s of
LINK_GBPS; unsliced plans pull source after source (sum over sources), sliced ones from all sources at once (the
slowest source, but at least the destination's LINK_GBPS for its total); every op costs OP_US more.
Compute beside copies is SLOWDOWN[phase] slower and the copy COPY_SLOWDOWN[phase] slower.
The whole routed-expert op (calibrate/moe_op.MoeOpTimer) takes MOE_OP_FIXED_MS + its 6*T*K*H*I FLOPs at
MOE_OP_TFLOPS, MOE_OP_SKEW times that with power_law_1.01 routing; the commit is COMMIT.
"""
from __future__ import annotations

import torch

from dwdp_trtllm.bench.floor_timer import FloorTimer
from dwdp_trtllm.perf.flops import core_flops

LINK_GBPS = 400.0
OP_US = 4.0
SLOWDOWN = {"attention_core": 1.21, "gemm": 1.06, "memory_bound": 1.3, "grouped_gemm": 1.01}
COPY_SLOWDOWN = {"attention_core": 1.1, "gemm": 1.2, "memory_bound": 1.5, "grouped_gemm": 1.15}
RATES = {"grouped_bf16": 600.0, "grouped_fp8": 900.0, "gemm": 700.0, "attention": 450.0}  # TFLOP/s
HBM_TBPS = 4.0
A2A_GBPS = 250.0  # bytes a rank sends to the others per second
MOE_OP_FIXED_MS = 0.5
MOE_OP_TFLOPS = 700.0
MOE_OP_SKEW = 1.2
COMMIT = "abc1234"


class FakeKernel:
    """A compute closure of known duration, tagged with its phase."""

    def __init__(self, phase: str, ms: float):
        self.phase, self.ms = phase, ms

    def __call__(self) -> None:
        pass


def copy_ms(jobs, share: bool = True) -> list[float]:
    counts: dict[int, int] = {}
    for _, plan in jobs:
        for s in {op.source_rank for op in plan.ops}:
            counts[s] = counts.get(s, 0) + 1
    out = []
    for _, plan in jobs:
        per: dict[int, int] = {}
        for op in plan.ops:
            per[op.source_rank] = per.get(op.source_rank, 0) + op.nbytes
        t = {s: b * (counts[s] if share else 1) / (LINK_GBPS * 1e6) for s, b in per.items()}
        link = (sum(t.values()) if not plan.sliced else max(max(t.values()), plan.total_bytes / (LINK_GBPS * 1e6)))
        out.append(link + len(plan.ops) * OP_US * 1e-3)
    return out


class FakeCopyTimer:
    def __init__(self, ranks: int, fail_on: str | None = None, interrupt: bool = False):
        self.ranks, self.fail_on, self.interrupt, self.calls = ranks, fail_on, interrupt, []

    def time_pulls(self, jobs):
        self.calls.append(("pulls", len(jobs), sum(plan.total_bytes for _, plan in jobs)))
        if self.interrupt:
            raise KeyboardInterrupt
        if self.fail_on == "group" and len(jobs) == self.ranks:
            raise RuntimeError("fake: a peer pull is not bit-exact")
        return copy_ms(jobs)

    def time_compute(self, rank, compute, calls):
        return compute.ms * calls

    def release(self):
        self.calls.append(("release", 0))

    def time_with_compute(self, jobs, compute, calls):
        return [t * COPY_SLOWDOWN[compute.phase] for t in copy_ms(jobs)], compute.ms * calls * SLOWDOWN[compute.phase]


class FakeFloorTimer(FloorTimer):
    """FloorTimer's shapes and sums (the real code) over closures of known duration (no kernel runs)."""

    def __init__(self, spec, weight_dtype: str):
        super().__init__(spec, torch.bfloat16, weight_dtype, torch.device("cpu"), warmup=0, reps=1)

    def time_ms(self, fn) -> float:
        return fn.ms

    def gemm_fn(self, m, n, k):
        return FakeKernel("gemm", 2.0 * m * n * k / (RATES["gemm"] * 1e9))

    linear_fn = gemm_fn

    def attention_core_fns(self, segments):
        flops = sum(float(core_flops(self.spec, n, p)) for p, n in segments)
        return [FakeKernel("attention_core", flops / (RATES["attention"] * 1e9))]

    def grouped_fn(self, rows_per_expert):
        flops = 6.0 * self.spec.hidden_size * self.spec.moe_intermediate * sum(rows_per_expert)
        return FakeKernel("grouped_gemm", flops / (RATES[f"grouped_{self.weight_dtype}"] * 1e9))


def fake_memory_bound(device, nbytes):
    return FakeKernel("memory_bound", 3 * nbytes / (HBM_TBPS * 1e9))


def moe_op_ms(spec, tokens: int, routing: str) -> float:
    """The fake op's time (module docstring): the answer a test computes independently."""
    flops = 6.0 * tokens * spec.top_k * spec.hidden_size * spec.moe_intermediate
    return (MOE_OP_FIXED_MS + flops / (MOE_OP_TFLOPS * 1e9)) * (MOE_OP_SKEW if routing == "power_law_1.01" else 1.0)


class FakeMoeOp:
    """calibrate/moe_op.MoeOpTimer of known answers; `made` records each (weight dtype, gemm, dwdp_size) asked."""

    made: list = []

    def __init__(self, spec, weight_dtype: str, gemm: str, dwdp_size: int):
        self.spec, self.released = spec, False
        FakeMoeOp.made.append((weight_dtype, gemm, dwdp_size))

    def time_ms(self, tokens: int, routing: str) -> float:
        return moe_op_ms(self.spec, tokens, routing)

    def release(self) -> None:
        self.released = True


class FakeA2aTimer:
    backend = "nccl"

    def time_ms(self, ranks, bytes_per_rank):
        return bytes_per_rank * (ranks - 1) / ranks / (A2A_GBPS * 1e6)


MACHINE = {"host": "fake-node", "at": "2026-12-05T07:00:00Z", "device": "cuda", "purpose": "calibration",
           "gpu_name": "NVIDIA H200", "gpu_count": 8, "driver": "580.159.04", "torch": "2.11.0", "cuda": "13.0",
           "topology": "GPU0 GPU1 ... NV18"}


def fake_tools(spec, gpus: int, **copy_kw):
    from dwdp_trtllm.calibrate.pipeline import Tools

    return Tools(copy_timer=lambda: FakeCopyTimer(gpus, **copy_kw), floor_timer=lambda wd: FakeFloorTimer(spec, wd),
                 a2a_timer=FakeA2aTimer(), machine=lambda: {**MACHINE, "gpu_count": gpus},
                 memory_bound=fake_memory_bound, moe_op=lambda wd, gemm, g: FakeMoeOp(spec, wd, gemm, g),
                 commit=lambda: COMMIT)
