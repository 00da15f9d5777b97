"""`dwdp calibrate`'s whole routed-expert op: the op the deployment runs on a DWDP rank (engine/moe_compute.
routed_experts_forward: sort, gather + quantisation, GEMM1, SwiGLU + quantisation, GEMM2, weighted combine) timed per
token count and routing, for one gemm path, over the buffers a DWDP-G rank holds ([local | slot]), written as the
calibration file's `moe_op` record (perf/moe_op.py's format; `dwdp plan --target trtllm` prices DWDP's routed
experts with it under gemm multi_buffer).

The timer (`MoeOpTimer`: time_ms(tokens, routing) -> ms, release()) is calibrate/moe_op_timer.EngineMoeOp on the
devices and a fake of known answers in the tests (tests/fakes/calibrate_fakes.py). Pure here: no torch.
"""
from __future__ import annotations

from typing import Protocol

from ..core.placement import make_placement
from ..perf.moe_op_record import model_dims

#: the routings measured: exactly balanced rows per expert (as the GEMM-only step and the tables' `balanced` rows)
#: and aiconfigurator's power_law_1.01 (spec/routing_skew.py, steered by the engine's router.skew_select)
ROUTINGS = ("balanced", "power_law_1.01")


class MoeOpTimer(Protocol):
    def time_ms(self, tokens: int, routing: str) -> float: ...

    def release(self) -> None: ...


def rank0_split(spec, dwdp_size: int) -> tuple[tuple[int, int], ...]:
    """Per expert (buffer, row) as DWDP rank 0 of a group of `dwdp_size` holds it: buffer 0 its local experts, buffer 1
    its prefetch slot (core/placement.ExpertPlacement.expert_location, the default balanced placement)."""
    from ..spec.config import DwdpConfig

    cfg = DwdpConfig(dwdp_size=dwdp_size)
    cfg.validate_for(spec.num_experts, prefix="")
    return make_placement(cfg, spec.num_experts).expert_location(0)


def split_record(spec, dwdp_size: int) -> dict:
    """The record's `split`: the local and slot expert counts of rank 0 (rank0_split)."""
    loc = rank0_split(spec, dwdp_size)
    local = sum(1 for b, _ in loc if b == 0)
    return {"dwdp_size": dwdp_size, "local_experts": local, "slot_experts": spec.num_experts - local}


#: timed rounds over every (routing, tokens) point after one untimed pass: the median of a point's rounds is its
#: figure. One pass in order read 9.0 ms for the first point where the same op benchmarked 5.7 ms (an H100,
#: 2026-12-07: docs/bench_results/routed_op_2026-12-07_h100): the first calls of a process pay the allocator's
#: growth, kernel selection and the clocks' ramp, so no point is timed before every point has run once.
ROUNDS = 3


def moe_op_ms(timer: MoeOpTimer, tokens: tuple[int, ...], routings: tuple[str, ...] = ROUTINGS,
              rounds: int = ROUNDS) -> dict[str, list[list]]:
    """{routing: [[tokens, ms], ...]}: one untimed call of every point, then `rounds` interleaved rounds (each round
    times every point once, in order), each point's median over its rounds."""
    import statistics

    if rounds < 1:
        raise ValueError(f"rounds: expected >= 1, got {rounds}")
    points = [(r, int(t)) for r in routings for t in tokens]
    for r, t in points:  # warm-up pass, discarded
        timer.time_ms(t, r)
    got: dict[tuple[str, int], list[float]] = {p: [] for p in points}
    for _ in range(rounds):
        for r, t in points:
            got[(r, t)].append(float(timer.time_ms(t, r)))
    return {r: [[int(t), statistics.median(got[(r, int(t))])] for t in tokens] for r in routings}


def moe_op_record(timer: MoeOpTimer, spec, *, tokens: tuple[int, ...], gemm: str, weight_dtype: str, dwdp_size: int,
                  source: dict, routings: tuple[str, ...] = ROUTINGS, rounds: int = ROUNDS) -> dict:
    """The `moe_op` record: ms per call of the timer at every (routing, tokens) (moe_op_ms: a warm-up pass, then the
    median of `rounds` interleaved rounds), with the gemm path, the split and `source` (gpu, date, commit, command,
    how, host)."""
    ms = moe_op_ms(timer, tokens, routings, rounds)
    return {"gemm": gemm, "weight_dtype": weight_dtype, "model": model_dims(spec),
            "split": split_record(spec, dwdp_size), "ms": ms, "source": dict(source)}
