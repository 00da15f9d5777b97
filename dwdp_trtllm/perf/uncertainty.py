"""The planner's uncertain inputs, their ranges and the priors they start from (pure data + small helpers).

A prediction is evaluated three times: nominal, and with every uncertain input at the end that is worse for
DWDP ("low") or better for DWDP ("high"); the speedup's range is [low, high] and the recommendation reads it
(recommend.recommend). One input at a time at its low end names what a marginal verdict depends on.

Inputs (docs/PLANNER.md "Uncertainty" lists each with its source):
- interference: compute beside the prefetch copy is slower, per phase. Priors from the paper on GB200 with real
  NVLink traffic (blog 19 Table 3, DEP4 -> DWDP4 per layer at ISL 8K: attention 269.67 -> 320.56 us = 1.19x;
  memory-bound "others" 241.69 -> 284.32 us = 1.18x; dense GEMMs 177.50 -> 189.28 us = 1.07x; grouped GEMM
  342.40 -> 337.42 us = 0.99x, i.e. none; paper appendix A.2: power-induced clock drops, 114% of TDP during
  overlap). A one-GPU measurement (a "peer" copy that is a same-device copy) never sets it. Range: half to one
  and a half times each prior's excess over 1 (how GB200's throttling transfers to Hopper is unmeasured); the
  grouped GEMM from 1.0 to the dense GEMMs' 1.07; on a family nothing measured the copies of (peer_evidence), from
  none to NO_EVIDENCE_INTERFERENCE times each excess.
- peer bandwidth achieved under many-to-one pulls beside compute: measured (a calibration's peer_copy_gbps):
  MEASURED_PEER_RANGE; a prior: PEER_RANGE of the copy model (375 GB/s one-way NVLink4 public p2p measurement x
  slice efficiency / contention model), and no narrower than the evidence behind it: where no calibration measured
  the copies and the GPU spec names no published measurement of them (peer.evidence), or one that pulled from fewer
  peers at once than a rank of the plan does (peer.measured_peers: 3 on MI355X, where DWDP8 pulls from 7), from
  NO_EVIDENCE_PEER_LOW, and the interference with it from none to NO_EVIDENCE_INTERFERENCE x each prior's excess
  (peer_evidence; the verdict then says "marginal: no measurement of ..." unless the whole range is on one side).
- DEP communication (not given with --dep-comm, not measured): trtllm: from the faster to the slower of the paths
  TensorRT-LLM selects among on that GPU (phases.default_dep_comm: DeepEP where it runs, AllGatherReduceScatter
  where it falls back: a chunked forward or DeepEP disabled; NVLinkOneSided on an MNNVL GPU, its modelled bandwidth
  up to A2A_FAST_EFF). engine: all-to-all efficiency 0.77 of NVLink (DeepEP report), range 0.60-0.90.
- routing (not given with --routing-skew): from balanced (DWDP's worse end: DEP's busiest EP rank is no busier
  than the mean) to the kernel tables' power_law_1.01 rows (aiconfigurator's default; engine: imbalance.skew_term's
  factors for the same law).
- extrapolated table cells: +-5% per doubling past the table's last row (kernel_tables.EXTRAP_PER_DOUBLING).
- compute efficiencies (target engine, where the GPU spec file marks its GEMM / attention / HBM efficiencies
  ASSUMPTION and no calibration measures compute): x EFF_RANGE of each (capped at 1); faster compute is DWDP's
  worse end (less time to hide the prefetch in, communication a larger share).
An input the user stated or a calibration measured is fixed at that value (perf/inputs.py says which).
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: per-phase interference priors (compute slowdown while copies run), blog 19 Table 3 / paper appendix A
PRIORS = {"attention_core": 1.19, "gemm": 1.07, "memory_bound": 1.18, "grouped_gemm": 1.0}
PRIOR_SOURCES = {
    "attention_core": "blog 19 Table 3 Attn 269.67 -> 320.56 us (GB200, DEP4 -> DWDP4, ISL 8K); paper A.2",
    "gemm": "blog 19 Table 3 DenseGEMM 177.50 -> 189.28 us",
    "memory_bound": "blog 19 Table 3 Others 241.69 -> 284.32 us; paper A.1 (up to 22.5% at full NVLink)",
    "grouped_gemm": "blog 19 Table 3 GroupedGEMM 342.40 -> 337.42 us (no slowdown)",
}
PEER_RANGE = (0.75, 1.0)  # achieved / modelled peer-copy bandwidth, a prior (low end first)
#: a measured peer bandwidth: run-to-run spread, and many-to-one pulls beside compute are not a plain copy's
MEASURED_PEER_RANGE = (0.9, 1.0)
#: a family with no published measurement of its peer copies (GpuSpec.peer_evidence None, or one that pulled from
#: fewer peers than the plan does) and no calibration: achieved / modelled peer bandwidth from this low end. The one
#: DWDP port on such a family (ROCm on MI355X, sgl-project/sglang#33310) ran at 0.579x / 0.529x of DEP at ISL 4K / 8K
#: (DWDP8, 32K tokens per rank), which this model reproduces only with its pulls at 0.22-0.28 of the modelled rate
NO_EVIDENCE_PEER_LOW = 0.2
#: likewise the interference: from none (1.0) to this multiple of each prior's excess over 1 (the priors are GB200's;
#: nothing transfers them to a family nobody measured copies on)
NO_EVIDENCE_INTERFERENCE = 2.0
#: the skew the routing range's DWDP-better end takes (kernel tables' rows; aiconfigurator's default)
SKEWED_ROUTING = "power_law_1.01"
ENGINE_A2A_EFF = (0.90, 0.77, 0.60)  # engine target: a2a efficiency at the low (DEP fast), nominal, high ends
INPUTS = ("interference", "peer bandwidth", "DEP communication", "routing", "extrapolated table cells",
          "compute efficiencies")
#: assumed compute efficiencies x (DWDP's worse end, better end)
EFF_RANGE = (1.25, 0.75)
#: how a user settles each input: `dwdp calibrate` measures what a node can measure; what is the deployment's choice
#: is stated with its flag
SETTLE = {
    "interference": "`dwdp calibrate` measures it (copies beside attention and GEMMs, 2+ GPUs)",
    "peer bandwidth": "`dwdp calibrate` measures it (many-to-one pulls, 2+ GPUs)",
    "DEP communication": "state it with --dep-comm (the path your DEP runs), or `dwdp calibrate` measures it",
    "routing": "state it with --routing-skew (power_law_<alpha> or your expert counts file)",
    "extrapolated table cells": "no file measures TensorRT-LLM's op past its table yet: time its fused MoE at the DEP "
                                "call size (scripts/bench_moe_kernels.py) or plan a smaller --mnt",
    "compute efficiencies": "`dwdp calibrate` measures the kernels on one GPU (or --gpu-spec a measured spec file)",
}


def _end(p: float, which: str, wide: bool = False) -> float:
    if which == "nominal":
        return p
    if wide:  # no evidence on this family (NO_EVIDENCE_INTERFERENCE)
        return 1 + (p - 1) * (NO_EVIDENCE_INTERFERENCE if which == "low" else 0.0)
    return 1 + (p - 1) * (1.5 if which == "low" else 0.5)


@dataclass(frozen=True)
class Scenario:
    """One setting of the uncertain inputs. `low` = every input at DWDP's worse end."""

    name: str = "nominal"
    interference: dict = field(default_factory=lambda: dict(PRIORS))
    peer: float = 1.0  # x the modelled peer bandwidth
    comm: str = "nominal"  # nominal | low (DEP comm at its fast end) | high (its slow end)
    extrap: float = 0.0  # -1: extrapolated cells at DWDP's worse end, +1: better end, 0: as extrapolated
    routing: str = "balanced"  # balanced | skewed (SKEWED_ROUTING: the DWDP-better end of an unstated routing)
    eff: str = "nominal"  # nominal | low (assumed compute efficiencies x EFF_RANGE[0]) | high (x EFF_RANGE[1])


def interference_at(which: str, override: float | dict | None, wide: bool = False) -> dict:
    """Per-phase slowdowns at `which` end: `override` (--interference, or a calibration's one number: every phase;
    a calibration's interference_by_phase: the measured phases, the others at their prior's nominal) is fixed.
    `wide`: a family with no evidence of its peer copies (peer_evidence), from none to NO_EVIDENCE_INTERFERENCE x
    each excess."""
    if isinstance(override, dict):
        return {k: float(override.get(k, v)) for k, v in PRIORS.items()}
    if override is not None:
        return {k: override for k in PRIORS}
    out = {k: _end(v, which, wide) for k, v in PRIORS.items()}
    if which == "low":
        out["grouped_gemm"] = _end(PRIORS["gemm"], which, wide) if wide else PRIORS["gemm"]
    return out


def scenario(which: str, *, only: str | None = None, interference: float | dict | None = None,
             peer_range: tuple[float, float] = PEER_RANGE, fixed: frozenset = frozenset(),
             wide_interference: bool = False) -> Scenario:
    """`which` in nominal / low / high; `only`: move just that input (one of INPUTS) to `which`'s end; inputs in
    `fixed` (stated or measured: perf/inputs.py) stay nominal; the peer bandwidth spans `peer_range`; the
    interference priors span their wide range where nothing measured the family's copies (`wide_interference`)."""
    def at(inp: str) -> str:
        return which if only in (None, inp) and inp not in fixed else "nominal"
    sign = {"nominal": 0.0, "low": -1.0, "high": 1.0}
    return Scenario(name=which if only is None else f"{which}:{only}",
                    interference=interference_at(at("interference"), interference, wide_interference),
                    peer={"nominal": 1.0, "low": peer_range[0], "high": peer_range[1]}[at("peer bandwidth")],
                    comm=at("DEP communication"), extrap=sign[at("extrapolated table cells")],
                    routing="skewed" if at("routing") == "high" else "balanced", eff=at("compute efficiencies"))


def scaled_gpu(gpu, which: str):
    """`gpu` with its GEMM, attention and HBM efficiencies at `which` end of EFF_RANGE (capped at 1)."""
    if which == "nominal":
        return gpu
    from dataclasses import replace
    f = EFF_RANGE[0] if which == "low" else EFF_RANGE[1]
    return replace(gpu, gemm_eff={k: min(1.0, v * f) for k, v in gpu.gemm_eff.items()},
                   attention_eff=min(1.0, gpu.attention_eff * f), hbm_eff=min(1.0, gpu.hbm_eff * f))


def peer_evidence(gpu, group: int, measured: bool) -> str:
    """What no one has measured of this plan's peer copies: '' when a calibration measured them (`measured`) or the
    GPU spec names a published measurement (GpuSpec.peer_evidence) that pulled from as many peers at once as a rank of
    `group` does; else the missing measurement in words (the verdict's "no measurement of ...")."""
    if measured:
        return ""
    name = getattr(gpu, "name", "this GPU")
    ev = getattr(gpu, "peer_evidence", None)
    if not ev:
        return f"peer copies on {name} (no calibration, no published measurement: `dwdp calibrate` measures them)"
    n, peers = getattr(gpu, "peer_measured_peers", None), max(group - 1, 1)
    if n and peers > n:
        return (f"peer copies from {peers} peers at once on {name} (the published one pulled from {n}: {ev}; "
                "`dwdp calibrate` measures them)")
    return ""


def peer_range(gpu, group: int, measured: bool) -> tuple[float, float]:
    """The achieved / modelled peer bandwidth range for a pull from group-1 peers (module docstring); from
    NO_EVIDENCE_PEER_LOW where nothing measured the family's copies at this many peers (peer_evidence)."""
    if measured:
        return MEASURED_PEER_RANGE
    if peer_evidence(gpu, group, measured):
        return NO_EVIDENCE_PEER_LOW, PEER_RANGE[1]
    return PEER_RANGE


def effective_slowdown(parts: dict, f: dict):
    """Time-weighted interference of a rank's compute: sum(phase x f[phase]) / sum(phase) (elementwise)."""
    total = sum(parts.values())
    slowed = sum(v * f[k] for k, v in parts.items())
    import numpy as np
    t = np.asarray(total, float)
    return np.where(t > 0, np.asarray(slowed, float) / np.where(t > 0, t, 1.0), 1.0)


@dataclass(frozen=True)
class Applied:
    """A layer's phases under one Scenario (times in us; _SR per sample and rank, _S per sample)."""

    own_SR: object  # a rank's work outside the routed experts
    compute_SR: object  # DWDP rank compute (own + all experts for its tokens), no interference
    slowdown_SR: object  # its time-weighted interference
    prefetch_us: float
    experts_dep_S: object
    comm_S: object


def apply(ph, sc: Scenario, prefetch_us: float, target: str) -> Applied:
    """Phases (perf/phases.Phases) with the scenario's inputs: extrapolated cells scaled per doubling, DEP
    communication at its end, the peer bandwidth, per-phase interference."""
    import numpy as np

    from .kernel_tables import EXTRAP_PER_DOUBLING as e
    dep = ph.experts_dep_S * (1 + sc.extrap * e) ** np.asarray(ph.beyond_dep_S, float)
    dwdp = ph.experts_dwdp_SR * (1 - sc.extrap * e) ** np.asarray(ph.beyond_dwdp_SR, float)
    comm = ph.comm_S
    if target == "trtllm":
        if sc.comm == "low":
            comm = np.minimum(comm, ph.comm_alt_S)
        elif sc.comm == "high":
            comm = np.maximum(comm, ph.comm_alt_S)
        b_comm = ph.beyond.get("DEP communication", 0.0)
        comm = comm * (1 + sc.extrap * e) ** b_comm
    elif sc.comm != "nominal":
        lo, nom, hi = ENGINE_A2A_EFF
        comm = comm * nom / (lo if sc.comm == "low" else hi)
    own = ph.own_SR
    compute = own + dwdp
    f = effective_slowdown({"attention_core": ph.core_SR, "gemm": ph.gemm_SR, "memory_bound": ph.membound_SR,
                            "grouped_gemm": dwdp}, sc.interference)
    return Applied(own, compute, f, prefetch_us / sc.peer, dep, comm)
