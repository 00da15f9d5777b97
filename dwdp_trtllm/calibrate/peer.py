"""Peer-copy measurements, each a small function of a CopyTimer (calibrate/copy_timer.py) and sizes, returning the
records of the calibration file (perf/calibration_detail.py) and the planner's summary keys derived from them.

GB/s here are one-way link bytes per second (bytes pulled / time), the unit of `peer_copy_gbps`.
- pair_bandwidth: one pull j <- i alone, every ordered pair;
- slice_sweep: one pair's pull cut into slices of each size the planner offers (0 = one op);
- many_to_one: G-1 destinations pull from one source at once, against one destination alone;
- group_pull: every rank pulls its copy plan of one MoE layer (copy_plan.build_copy_plan over the placement) from
  its G-1 peers at once, sliced (round-robin across sources) and unsliced (sequential by source); its slowdown is
  the time over what the layer's bytes take at the pair bandwidth and the slice size's efficiency, which is what
  the planner's `contention_slowdown` multiplies (perf/cost_model.prefetch_us).
"""
from __future__ import annotations

import statistics

from ..spec.config import DwdpConfig
from ..core.copy_plan import ExpertLayout, build_copy_plan
from ..perf.plan_spec import PlanSpec
from ..core.placement import make_placement
from .copy_timer import CopyTimer, pull_plan

#: the planner's default slice size (perf/plan_spec.PlanSpec.slice_bytes)
PLANNER_SLICE = PlanSpec.slice_bytes[0]


def _gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6


def pair_bandwidth(timer: CopyTimer, nbytes: int) -> list[dict]:
    """[{src, dst, gbps}] for every ordered pair of the timer's ranks: one pull of `nbytes` alone."""
    out = []
    for src in range(timer.ranks):
        for dst in range(timer.ranks):
            if src != dst:
                ms = timer.time_pulls([(dst, pull_plan(nbytes, src, 0, dst))])[0]
                out.append({"src": src, "dst": dst, "gbps": _gbps(nbytes, ms)})
    return out


def slice_sweep(timer: CopyTimer, nbytes: int, slice_sizes: tuple[int, ...]) -> list[tuple[int, float]]:
    """[(slice_bytes, gbps)] of rank 1 pulling `nbytes` from rank 0 cut into slices of each size (0: one op)."""
    return [(s, _gbps(nbytes, timer.time_pulls([(1, pull_plan(nbytes, 0, s, 1))])[0])) for s in slice_sizes]


def many_to_one(timer: CopyTimer, nbytes: int, slice_sizes: tuple[int, ...]) -> list[dict]:
    """Per slice size: ranks 1..G-1 pull `nbytes` from rank 0 at once; the slowest destination against one alone."""
    out = []
    dests = range(1, timer.ranks)
    for s in slice_sizes:
        alone = timer.time_pulls([(1, pull_plan(nbytes, 0, s, 1))])[0]
        together = timer.time_pulls([(d, pull_plan(nbytes, 0, s, d)) for d in dests])
        out.append({"slice_bytes": s, "destinations": len(dests), "alone_gbps": _gbps(nbytes, alone),
                    "together_gbps": _gbps(nbytes, max(together)), "slowdown": max(together) / alone})
    return out


def group_pull(timer: CopyTimer, layout: ExpertLayout, num_experts: int, slice_sizes: tuple[int, ...],
               pair_gbps: float, slice_gbps: dict[int, float]) -> list[dict]:
    """Per slice size: every rank pulls its plan of one MoE layer from its G-1 peers at once. slowdown = the slowest
    rank's time / (its bytes at `slice_gbps[s]`, the pair's rate at that slice size; `pair_gbps` unsliced)."""
    G = timer.ranks
    placement = make_placement(DwdpConfig(dwdp_size=G), num_experts)
    flat = ExpertLayout(("expert",), (sum(layout.tensor_bytes),))  # one buffer per rank: every tensor of an expert
    out = []
    for s in slice_sizes:
        plans = [build_copy_plan(placement, flat, r, sliced=bool(s), slice_bytes=s or PLANNER_SLICE) for r in range(G)]
        ms = timer.time_pulls([(r, p) for r, p in enumerate(plans)])
        worst = max(range(G), key=lambda r: ms[r])
        nbytes = plans[worst].total_bytes
        ideal = nbytes / ((slice_gbps.get(s, pair_gbps) if s else pair_gbps) * 1e9) * 1e3
        out.append({"slice_bytes": s, "ranks": G, "bytes_per_rank": nbytes, "max_ms": ms[worst],
                    "slowdown": ms[worst] / ideal})
    return out


def summary_keys(pairs: list[dict], slices: list[tuple[int, float]], groups: list[dict]) -> dict:
    """The planner's keys from the detail records: peer_copy_gbps (median pair), slice_efficiency (sliced / one-op
    pull of the same pair), contention_slowdown (group_pull unsliced, and sliced at the planner's default slice size,
    else the smallest measured; at least 1, the key's floor)."""
    out: dict = {}
    if pairs:
        out["peer_copy_gbps"] = statistics.median(p["gbps"] for p in pairs)
    bulk = dict(slices).get(0)
    if bulk:
        out["slice_efficiency"] = [[s, g / bulk] for s, g in slices if s]
    sliced = sorted((g for g in groups if g["slice_bytes"]), key=lambda g: (g["slice_bytes"] != PLANNER_SLICE, g["slice_bytes"]))
    cont = {("sliced" if g["slice_bytes"] else "unsliced"): max(1.0, g["slowdown"])
            for g in [g for g in groups if not g["slice_bytes"]] + sliced[:1]}
    if cont:
        out["contention_slowdown"] = cont
    return out
