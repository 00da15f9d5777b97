#!/usr/bin/env python3
"""`dwdp size`'s simulator against the paper's measured context-only and serving numbers (docs/SIZING.md,
"Validation"). This script computes every number AND every verdict of that section; `--write` regenerates it.

Paper (arXiv 2604.01621) setup, section 5.1: DeepSeek-R1 NVFP4 experts on GB200 NVL72, FP8 KV cache, DEP4 context
servers against DWDP4 groups; the runs exclude contention mitigation (NVIDIA/TensorRT-LLM
docs/source/blogs/tech_blog/blog19_DWDP_...NVL72.md @ 0ad98a34, "Experimental Setup": "the results in this section
do not include the additional performance gain from the contention-mitigation optimization"), so DWDP's copies are
priced unsliced. The benchmark client is upstream's examples/dwdp/reproduce.py (@ 1f939488, build_full_config): a
closed loop of concurrency = batch x gen_tp users (`concurrency_list`), num_prompts 4096 for OSL 1, else
(20000 // concurrency) rounds of it; the deployments are examples/dwdp/dwdp_reproduce.yaml's (@ 6ed140e9), where
`dwdp_group` is the number of DWDP groups (dwdp_size = num_ctx_servers // dwdp_group). The planner's pricing is
data/validation/published.yaml's paper-t3-* setup (`--dep-comm alltoall --interference 1.19`).

- Table 3a (context only, TTFT speedup DEP/DWDP 1.27 / 1.16 / 1.11 at ISL 1K / 8K / 32K, MNT 32K): fixed-length
  ISL (Table 3a's ISL 16K row is Table 3c's ISL-STD-0 row), one DEP4 server against 4 DWDP4 ranks, 256 users
  (reproduce.py's context-only matrix: batch 64 x gen_tp 4), 4096 prompts, OSL 1; the trend over ISL is its own row.
- Table 3d (ISL 16K: DWDP3 0.86, DWDP4 1.15 TTFT speedup over DEP4): the same loop, 3 DWDP3 ranks.
- Table 5 (DWDP/DEP output TPS/GPU per TPS/user band) and Table 6 (median TTFT per band): each band's published
  deployments from dwdp_reproduce.yaml (DEP and DEP minus one server; DWDP and DWDP minus one or two groups), ISL
  uniform in [0.8, 1] x 8K, OSL 1K, the closed loop above; per band each mode's point with the most output TPS/GPU
  (its Pareto point at that generation setup). Each band runs the recipe's own `mtp` (1 in 20-70, 3 in 80-180),
  priced by the generation side (sizing/decode_cost.py: verify at batch x (1 + k) tokens, k MTP-layer passes,
  acceptance 0.85); the band is the published deployment's, not our TPS/user. Ablations per band: MTP off, DWDP
  calibrated to the paper's ISL-8K speedup, the recipe's context servers (whole prompts, at most 4 per rank per
  iteration, the MTP layer over the prompt: RECIPE_CTX), a DWDP rank's KV transfer sharing its links with its
  peers' pulls, DWDP's worse end of the planner's ranges in both modes (WORSE_END: the low end of the range
  `dwdp size` prints), the paper's pair of deployments (`paper_pair`, also at that worse end and with
  TensorRT-LLM's round-robin router over the context servers, RR_EFFECT), that pair over the
  client's full 20000 // users rounds (alone, at the worse end and with the calibration), and every effect at
  once. Table 3a has the worse end as an ablation too (the context-only rows it moves).

Verdicts (`verdict`): a row is within TOL of its OWN published value or outside it; an outside row counts as
explained only beside an ablation row (same table) that changes a named modelled effect (or a named
combination of them) and moves the value inside TOL; a trend row passes when ours moves in the published direction at every step; an order row when ours
is on the published side of 1; a ratio of two runs that are the same deployment is "not a comparison".

Run: PYTHONPATH=. python3 scripts/size_validate.py [--write docs/SIZING.md] [--quick]  (a few minutes on 2 cores;
--quick: fewer prompts, for a look, not for the docs). Prints the markdown section. `--only 5 --write FILE
[--jobs N]`: the Table 5/6 rows alone (N bands at once), spliced beside FILE's Table 3 rows (splice_rows);
`--only 3 --write FILE`: the Table 3 rows alone, spliced before FILE's Table 5/6 rows.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.sizing import traffic as tr
from dwdp_trtllm.sizing.context_cost import ContextCost
from dwdp_trtllm.sizing.decode_cost import decode_cost, stated_pricing
from dwdp_trtllm.sizing.metrics import Metrics, Slo, summarize
from dwdp_trtllm.sizing.search import Problem
from dwdp_trtllm.sizing.simulator import Deployment, simulate
from dwdp_trtllm.spec.models import PRESETS

TOL = 0.15
MNT = 32768
UNSLICED = 0  # slice bytes: one copy per (peer, tensor), the paper's runs (no contention mitigation)
SLICED = 2 << 20  # the contention mitigation (2 MiB round-robin slices), for the ablation
#: the planner's uncertain inputs at the end worse for DWDP, in both modes' context iterations (perf/uncertainty.py's
#: "low" scenario; with --interference stated, what moves is the peer bandwidth, DEP's communication and the
#: extrapolated kernel-table cells): the `[low-high]` range's low end that `dwdp size` prints
WORSE_END = "low"
WORSE_EFFECT = ("DWDP's worse end of the planner's ranges, both modes (peer copies at 0.75x, DEP communication at "
                "its fast end, extrapolated table cells at DWDP's worse end)")
WORSE_SHORT = "DWDP's worse end of the planner's ranges"
T3_USERS = 256  # reproduce.py: concurrency = batch 64 x gen_tp 4 (context_only_* rows)
T3_PROMPTS = 4096  # reproduce.py: num_prompts for OSL 1
E2E_PROMPTS = 20000  # reproduce.py: num_prompts otherwise; the client runs 20000 // concurrency rounds
E2E_SIM_PROMPTS = 4096  # what we simulate per end-to-end run (at least 2 rounds of the loop): 2 CPU cores
#: Table 3a: ISL -> published TTFT speedup DEP/DWDP (paper s5.2 Table 3a)
T3A = {1024: 1.27, 8192: 1.16, 32768: 1.11}
#: Table 3d at ISL 16K: DWDP group size -> published TTFT speedup over DEP4
T3D = {4: 1.15, 3: 0.86}
T3D_ISL = 16384


@dataclass(frozen=True)
class Band:
    """One TPS/user band: Table 5's TPS/GPU speedup, Table 6's median TTFT (ms) of DEP and DWDP, and the band's
    deployments in dwdp_reproduce.yaml: generation (gen_tp, batch per rank), DEP servers of 4 GPUs and DWDP4
    groups tried (each mode's best output TPS/GPU is its point)."""

    label: str
    tps_gpu: float
    ttft_dep_ms: float
    ttft_dwdp_ms: float
    gen_tp: int
    batch: int
    dep_servers: tuple[int, ...]
    dwdp_groups: tuple[int, ...]
    mtp: int  # the recipe's `mtp` (draft tokens per step), priced by the generation side

    @property
    def users(self) -> int:
        return self.batch * self.gen_tp


#: paper Table 5 / Table 6 (= blog 19 Tables 4 / 5) and dwdp_reproduce.yaml's e2e_* experiments of the same band
BANDS = (
    Band("20-30", 1.10, 2538, 8314, 8, 256, (5, 4), (5, 4), 1),
    Band("40-50", 1.08, 1919, 7012, 8, 128, (4, 3), (4, 3), 1),
    Band("60-70", 1.10, 965, 1640, 16, 64, (7, 6), (7, 6, 5), 1),
    Band("80-90", 1.06, 1669, 2280, 16, 32, (4,), (4, 3), 3),
    Band("170-180", 0.97, 494, 660, 32, 2, (2,), (2, 1), 3),
)


# ---------------------------------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Row:
    """One line of the validation table. kind: compare (ours against the row's own published value), ablation (one
    modelled effect changed; `of` names the compared row it moves, `published` is that row's), trend (published
    and ours are sequences over ISL), order (ours on the published side of 1), info (no published value)."""

    row: str
    quantity: str
    published: float | tuple[float, ...] | None
    ours: float | tuple[float, ...]
    detail: str = ""
    kind: str = "compare"
    of: str = ""
    effect: str = ""
    same_deployment: bool = False  # the ratio's two runs are one deployment: not a comparison
    tol: float = TOL  # the agreement this row is held to


def rel_error(published: float, ours: float) -> float:
    return ours / published - 1.0


def within(published: float, ours: float, tol: float = TOL) -> bool:
    return abs(rel_error(published, ours)) <= tol + 1e-12


def _falls(xs) -> bool:
    return all(b < a for a, b in zip(xs, xs[1:]))


def _rises(xs) -> bool:
    return all(b > a for a, b in zip(xs, xs[1:]))


def _same_side(r: Row) -> bool:
    return (r.ours - 1.0) * (r.published - 1.0) > 0


def verdict(r: Row, rows: list[Row] = (), tol: float | None = None) -> str:
    """The verdict of row `r` among `rows` (module docstring); `tol` overrides the row's own."""
    tol = r.tol if tol is None else tol
    if r.same_deployment:
        return "not a comparison: both modes ran the same deployment"
    if r.kind == "info":
        return "no published value"
    if r.kind == "trend":
        pub, ours = tuple(r.published), tuple(r.ours)
        direction = "falls" if _falls(pub) else "rises" if _rises(pub) else "is flat"
        same = (_falls(ours) if _falls(pub) else _rises(ours) if _rises(pub) else False)
        return f"{'same trend' if same else 'WRONG trend'}: published {direction} with ISL"
    if r.kind == "order":
        side = "above" if r.published > 1 else "below"
        if _same_side(r):
            return (f"ablation of {r.of}: restores the order" if r.effect else f"same order: published {side} 1")
        if r.effect:
            return f"ablation of {r.of}: {'restores the order' if _same_side(r) else 'still reversed'}"
        fixes = [a for a in rows if a.kind == "order" and a.effect and a.of == r.row and _same_side(a)]
        if fixes:
            return f"REVERSED order (published {side} 1); explained: {fixes[0].effect} restores it ({fixes[0].ours:.2f})"
        return f"REVERSED order (published {side} 1), unexplained"
    err = rel_error(r.published, r.ours)
    if r.kind == "ablation":
        inside = "inside" if within(r.published, r.ours, tol) else "outside"
        return f"ablation of {r.of}: {err:+.0%} ({inside} {tol:.0%})"
    if within(r.published, r.ours, tol):
        return f"within {tol:.0%} ({err:+.0%})"
    fixes = [a for a in rows if a.kind == "ablation" and a.of == r.row and within(a.published, a.ours, tol)]
    if fixes:
        return f"outside {tol:.0%} ({err:+.0%}); explained: {fixes[0].effect} moves it to {fixes[0].ours:.2f}"
    return f"OUTSIDE {tol:.0%} ({err:+.0%}), unexplained"


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, tuple):
        return " / ".join(f"{v:.2f}" for v in x)
    return f"{x:.2f}"


def render(rows: list[Row]) -> str:
    """The markdown table: row, quantity, published, ours, verdict (computed here), what ours is."""
    out = ["| row | quantity | published | ours | verdict | ours: setting and parts |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        name = f"{r.of or r.row}, ablation: {r.effect}" if r.effect else r.row
        out.append(f"| {name} | {r.quantity} | {_fmt(r.published)} | {_fmt(r.ours)} | {verdict(r, rows)} | "
                   f"{r.detail} |")
    return "\n".join(out)


# -------------------------------------------------------------------------------------------------- simulation
def spec() -> PlanSpec:
    return PlanSpec(model=PRESETS["deepseek-r1"], gpu=get_gpu("gb200"), weight_dtype="nvfp4", target="trtllm",
                    dep_comm="alltoall", interference=1.19)


@dataclass
class Setting:
    """One simulated context side under the paper's client: what changes between a row and its ablations."""

    isl_dist: str = "fixed"
    users: int = T3_USERS
    prompts: int | None = T3_PROMPTS  # None: as many as duration_s allows (traffic.CLOSED_PER_USER_S)
    duration_s: float = 86_400
    slice_bytes: int = UNSLICED
    redundant: int = 0
    kv: bool = False  # context only: the KV transfer (50 GB/s) before the user's next request
    dwdp_scale: float = 1.0  # DWDP iteration time x this (an ablation: DWDP calibrated to a published speedup)
    ctx_max_batch: int = 0  # requests per context iteration per rank (0: no limit)
    chunked: bool = True  # chunked prefill on the context servers (False: whole prompts)
    mtp_prompt: bool = False  # the MTP layer runs over the prompt on the context servers
    kv_contention: bool = False  # DWDP: the KV transfer shares the rank's links with its expert pulls
    which: str = "nominal"  # the planner's uncertainty scenario of both modes' context iterations (WORSE_END)
    router: str = "least_tokens"  # how requests pick a context server (simulator.Deployment.ctx_router)


def _arrivals(isl: int, osl: int, st: Setting, seed: int = 0) -> tr.Arrivals:
    return tr.generate(tr.Traffic(tr.LengthDist(isl, st.isl_dist), tr.LengthDist(osl), concurrency=st.users,
                                  duration_s=st.duration_s, seed=seed, requests=st.prompts))


def run(s: PlanSpec, d: Deployment, arrivals: tr.Arrivals, st: Setting, dc=None) -> Metrics:
    """Simulate deployment `d` (context cost at the setting's slicing / redundancy; decode `dc` or none: context
    only, the first token is the answer) and summarise it."""
    cost = ContextCost(s, d.mode, d.ctx_group, d.redundant or st.redundant, st.slice_bytes, which=st.which,
                       mtp_prompt=st.mtp_prompt, kv_contention=st.kv_contention)
    d = dataclasses.replace(d, ctx_max_batch=st.ctx_max_batch, chunked=st.chunked, ctx_router=st.router)
    scale = st.dwdp_scale if d.mode == "dwdp" else 1.0
    p = Problem(spec=s, arrivals=arrivals, slo=Slo(), budget=512, gpus_per_node=72, dwdp_sizes=(4,), dep_sizes=(4,),
                mnts=(MNT,), gen_tps=(d.gen_tp,), gen_batches=(d.gen_batch,))  # for its kv_time
    if dc is None:
        step, kv = (lambda tp, b, k: 0.0), (p.kv_time if st.kv else (lambda isl: 0.0))
    else:
        step, kv = (lambda tp, b, k: dc.step_ms(tp, b, k) * 1e-3), p.kv_time
    r = simulate(arrivals, d, lambda k, segs: cost.seconds(segs) * scale, step, kv)
    return summarize(r, d.gpus, Slo())


def ttft_speedup(s: PlanSpec, isl: int, dwdp_group: int, st: Setting) -> tuple[float, Metrics, Metrics]:
    """Context only: TTFT p50 of one DEP4 server over that of dwdp_group DWDP ranks (one group), same client."""
    a = _arrivals(isl, 1, st)
    dep = run(s, Deployment("dep", 4, 1, MNT, 1, 1, 1), a, st)
    dw = run(s, Deployment("dwdp", dwdp_group, dwdp_group, MNT, 1, 1, 1), a, st)
    return dep.ttft_p50_s / dw.ttft_p50_s, dep, dw


def _t3_detail(dep: Metrics, dw: Metrics, st: Setting, g: int = 4) -> str:
    n = f"{st.prompts} prompts" if st.prompts else f"{st.duration_s:g} s"
    return (f"TTFT p50 DEP4 {dep.ttft_p50_s:.2f} s, DWDP{g} {dw.ttft_p50_s:.2f} s; {st.users} users, {n}, "
            f"ISL {st.isl_dist}, copies {'sliced' if st.slice_bytes else 'unsliced'}"
            + ("; KV transfer before the next request" if st.kv else ""))


def table3(s: PlanSpec, prompts: int = T3_PROMPTS) -> list[Row]:
    """Table 3a and 3d rows, the trend row and the ablations (module docstring)."""
    base = Setting(prompts=prompts)
    rows, ours_by_isl = [], {}
    for isl, pub in T3A.items():
        name = f"Table 3a, ISL {isl // 1024}K"
        sp, dep, dw = ttft_speedup(s, isl, 4, base)
        ours_by_isl[isl] = sp
        rows.append(Row(name, "TTFT speedup DEP4/DWDP4", pub, sp, _t3_detail(dep, dw, base)))
        for effect, st in (
                ("ISL uniform in [0.8, 1] x ISL instead of fixed", Setting(isl_dist="uniform_ratio", prompts=prompts)),
                ("sliced copies (contention mitigation on)", Setting(slice_bytes=SLICED, prompts=prompts)),
                ("the previous setting: 4 x MNT/ISL users for 60 s, ISL U[0.8, 1], sliced copies, KV transfer "
                 "between a user's requests",
                 Setting(isl_dist="uniform_ratio", users=4 * max(1, MNT // isl), prompts=None, duration_s=60,
                         slice_bytes=SLICED, kv=True)),
                (WORSE_EFFECT, Setting(prompts=prompts, which=WORSE_END))):
            v, dep2, dw2 = ttft_speedup(s, isl, 4, st)
            rows.append(Row(name, "TTFT speedup DEP4/DWDP4", pub, v, _t3_detail(dep2, dw2, st), kind="ablation",
                            of=name, effect=effect))
    for g, pub in T3D.items():
        name = f"Table 3d, ISL 16K, DWDP{g}"
        sp, dep, dw = ttft_speedup(s, T3D_ISL, g, base)
        if g == 4:
            ours_by_isl[T3D_ISL] = sp
        rows.append(Row(name, f"TTFT speedup DEP4/DWDP{g}", pub, sp, _t3_detail(dep, dw, base, g)))
        if g == 3:
            # reproduce.py's placement: num_experts_per_worker = 256 - (dwdp_size - 1) x prefetch 64 = 128 local
            st = Setting(prompts=prompts, redundant=128 - 86)
            v, dep2, dw2 = ttft_speedup(s, T3D_ISL, g, st)
            rows.append(Row(name, "TTFT speedup DEP4/DWDP3", pub, v, _t3_detail(dep2, dw2, st, g), kind="ablation",
                            of=name, effect="128 local experts per DWDP3 rank (reproduce.py's prefetch 64)"))
    isls = sorted(ours_by_isl)
    pub_seq = tuple({**T3A, T3D_ISL: T3D[4]}[i] for i in isls)
    rows.append(Row("Table 3a+3d, DWDP4 over ISL " + " / ".join(f"{i // 1024}K" for i in isls),
                    "TTFT speedup trend", pub_seq, tuple(ours_by_isl[i] for i in isls),
                    "16K: Table 3d's DWDP4 row", kind="trend"))
    return rows


def _deployment(band: Band, mode: str, n: int) -> Deployment:
    """The band's deployment of `mode` with `n` DEP4 servers or `n` DWDP4 groups (dwdp_reproduce.yaml)."""
    return Deployment(mode, 4, n * (1 if mode == "dep" else 4), MNT, band.gen_tp, 1, band.batch)


def _runs(s: PlanSpec, band: Band, mode: str, a: tr.Arrivals, st: Setting, dc,
          sizes: tuple[int, ...] | None = None) -> list[tuple[Metrics, Deployment]]:
    """Every deployment of `mode` the band's recipe lists (or `sizes`), simulated."""
    out = []
    for n in sizes or (band.dep_servers if mode == "dep" else band.dwdp_groups):
        d = _deployment(band, mode, n)
        out.append((run(s, d, a, st, dc), d))
    return out


def _best(runs: list[tuple[Metrics, Deployment]]) -> tuple[Metrics, Deployment]:
    """The run with the most output TPS/GPU (the mode's Pareto point at the band's generation setup)."""
    return max(runs, key=lambda r: r[0].output_tps_per_gpu)


def paper_pair(band: Band) -> tuple[int, int]:
    """(DEP4 servers, DWDP4 groups) of the pair the paper compares in the band: DEP's recipe deployment (`e2e_*_dep`,
    the most servers) against DWDP's largest deployment with fewer context GPUs (blog 19 @ 0ad98a34, "End-to-End
    Evaluation": "DWDP typically uses fewer context GPUs than the baseline", and Table 5's TTFT "increase[s]
    substantially for pairs with more aggressive reductions in context GPU count")."""
    dep = max(band.dep_servers)
    fewer = [g for g in band.dwdp_groups if g < dep]
    return dep, max(fewer) if fewer else min(band.dwdp_groups)


def _e2e_detail(w: tuple[Metrics, Deployment], e: tuple[Metrics, Deployment]) -> str:
    (mw, dw), (me, de) = w, e
    return (f"DWDP {dw.ctx_gpus} + {dw.gen_gpus} GPUs {mw.output_tps_per_gpu:.0f} TPS/GPU, TTFT {mw.ttft_p50_s:.2f} s, "
            f"{mw.tps_user:.0f} TPS/user; DEP {de.ctx_gpus} + {de.gen_gpus} {me.output_tps_per_gpu:.0f}, "
            f"{me.ttft_p50_s:.2f} s, {me.tps_user:.0f}")


def _rounds(band: Band, full: bool = False, cap: int | None = None) -> int:
    """Rounds of the closed loop simulated: the client's (E2E_PROMPTS // users) when `full`, else at least 2 and
    about E2E_SIM_PROMPTS prompts (2 CPU cores); `cap` bounds it (--quick)."""
    client = max(1, E2E_PROMPTS // band.users)
    r = client if full else min(client, max(2, -(-E2E_SIM_PROMPTS // band.users)))
    return min(r, cap) if cap else r


#: the recipe's end-to-end context servers (examples/dwdp/reproduce.py @ 1f939488, build_worker_config's ctx_cfg, with
#: dwdp_reproduce.yaml's e2e_* ctx_max_bs 4 / ctx_max_num_tokens 33000 / mtp >= 1): max_batch_size 4, no
#: enable_chunked_prefill (TensorRT-LLM's default: off), speculative_config MTP (the MTP layer over the prompt).
#: 4 whole prompts of at most 8192 tokens fit our MNT 32768 as they fit its 33000: the budget never binds.
RECIPE_CTX = dict(ctx_max_batch=4, chunked=False, mtp_prompt=True)
RECIPE_CTX_EFFECT = ("the recipe's context servers: whole prompts (no chunked prefill), at most 4 per rank per "
                     "iteration, the MTP layer over the prompt")
KV_EFFECT = "a DWDP rank's KV transfer sharing its NVLink with its peers' expert pulls"
#: TensorRT-LLM's disaggregated server without a router configured (the recipe's server_config.yaml,
#: examples/disaggregated/slurm/benchmark/gen_server_config.py, sets none): round robin over the context servers
#: (tensorrt_llm/serve/router.py @ 00895e31 `create_router`); the simulator's default sends each request to the
#: server with the fewest outstanding tokens
RR_EFFECT = "TensorRT-LLM's default router: round robin over the context servers"


def table56(s: PlanSpec, rounds_cap: int | None = None, calibrated_scale: float | None = None,
            bands: tuple[Band, ...] = BANDS) -> list[Row]:
    """Table 5 (TPS/GPU) and Table 6 (median TTFT order) rows per band, at the band's own MTP (Band.mtp, priced by
    the generation side: decode_cost.DecodeCost.step_ms at its default acceptance), and their ablations: MTP off;
    with `calibrated_scale`, DWDP's context iteration scaled so that its ISL-8K context speedup equals the paper's
    (Table 3a); the recipe's context servers (RECIPE_CTX); a DWDP rank's KV transfer contending with its peers'
    pulls (ContextCost.kv_contention); the paper's pair of deployments (`paper_pair`) instead of each mode's best;
    that pair over the client's full rounds; the pair, full rounds and calibrated DWDP together; DWDP's worse end
    of the planner's ranges (WORSE_END, both modes) for each mode's best point, the pair and the pair over the
    client's rounds; and every one of these effects at once."""
    rows = []
    for band in bands:
        rounds = _rounds(band, cap=rounds_cap)
        st = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * rounds)
        a = _arrivals(8192, 1024, st)
        dc = decode_cost(s.model, "gb200", "nvfp4", mtp=band.mtp)
        name5, name6 = f"Table 5, {band.label} TPS/user", f"Table 6, {band.label} TPS/user"

        def emit(effect: str, e, w, det: str = ""):
            same = (e[1].ctx_gpus, e[1].gen_gpus) == (w[1].ctx_gpus, w[1].gen_gpus) and \
                abs(w[0].output_tps_per_gpu / e[0].output_tps_per_gpu - 1) < 0.005
            kind = "ablation" if effect else "compare"
            rows.append(Row(name5, "output TPS/GPU DWDP/DEP", band.tps_gpu,
                            w[0].output_tps_per_gpu / e[0].output_tps_per_gpu, _e2e_detail(w, e) + det, kind=kind,
                            of=name5 if effect else "", effect=effect, same_deployment=same))
            rows.append(Row(name6, "median TTFT DWDP/DEP", round(band.ttft_dwdp_ms / band.ttft_dep_ms, 4),
                            w[0].ttft_p50_s / e[0].ttft_p50_s,
                            f"published {band.ttft_dwdp_ms:.0f} / {band.ttft_dep_ms:.0f} ms" if not effect else "",
                            kind="order", of=name6 if effect else "", effect=effect))

        dep_runs, dw_runs = _runs(s, band, "dep", a, st, dc), _runs(s, band, "dwdp", a, st, dc)
        emit("", _best(dep_runs), _best(dw_runs),
             f"; {band.users} users x {rounds} rounds; {dc.describe_mtp()}")
        dc0 = decode_cost(s.model, "gb200", "nvfp4")
        emit(f"MTP off (the recipe runs MTP {band.mtp})", _best(_runs(s, band, "dep", a, st, dc0)),
             _best(_runs(s, band, "dwdp", a, st, dc0)))
        cal_st, cal = None, ""
        if calibrated_scale:
            cal = f"DWDP's context iteration x {calibrated_scale:.3f} (its ISL-8K speedup set to the paper's {T3A[8192]:.2f})"
            cal_st = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * rounds,
                             dwdp_scale=calibrated_scale)
            emit(cal, _best(dep_runs), _best(_runs(s, band, "dwdp", a, cal_st, dc)))
        base = dict(isl_dist="uniform_ratio", users=band.users, prompts=band.users * rounds)
        rst = Setting(**base, **RECIPE_CTX)
        emit(RECIPE_CTX_EFFECT, _best(_runs(s, band, "dep", a, rst, dc)), _best(_runs(s, band, "dwdp", a, rst, dc)))
        kst = Setting(**base, kv_contention=True)
        emit(KV_EFFECT, _best(dep_runs), _best(_runs(s, band, "dwdp", a, kst, dc)))
        wst = Setting(**base, which=WORSE_END)
        w_dep, w_dw = _runs(s, band, "dep", a, wst, dc), _runs(s, band, "dwdp", a, wst, dc)
        emit(WORSE_EFFECT, _best(w_dep), _best(w_dw))
        n_dep, n_dw = paper_pair(band)
        pair = (f"the paper's pair: DEP {4 * n_dep} context GPUs (the recipe's e2e_*_dep) against DWDP {4 * n_dw} "
                f"(fewer)")
        pick = {d.ctx_gpus: (m, d) for m, d in dep_runs}, {d.ctx_gpus: (m, d) for m, d in dw_runs}
        emit(pair, pick[0][4 * n_dep], pick[1][4 * n_dw])
        wpick = {d.ctx_gpus: (m, d) for m, d in w_dep}, {d.ctx_gpus: (m, d) for m, d in w_dw}
        emit(f"{pair}, at {WORSE_SHORT}", wpick[0][4 * n_dep], wpick[1][4 * n_dw])
        rr = Setting(**base, router="round_robin")
        emit(f"{pair}, {RR_EFFECT}", _runs(s, band, "dep", a, rr, dc, (n_dep,))[0],
             _runs(s, band, "dwdp", a, rr, dc, (n_dw,))[0])
        full = _rounds(band, full=True, cap=rounds_cap)
        if full != rounds:
            fst = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * full)
            fa = _arrivals(8192, 1024, fst)
            fe = _runs(s, band, "dep", fa, fst, dc, (n_dep,))[0]
            emit(f"{pair}, over the client's {full} rounds (20000 // {band.users} users)", fe,
                 _runs(s, band, "dwdp", fa, fst, dc, (n_dw,))[0], f"; {band.users} users x {full} rounds")
            fw = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * full, which=WORSE_END)
            emit(f"{pair}, the client's {full} rounds, at {WORSE_SHORT}", _runs(s, band, "dep", fa, fw, dc, (n_dep,))[0],
                 _runs(s, band, "dwdp", fa, fw, dc, (n_dw,))[0])
            if calibrated_scale:
                fcal = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * full,
                               dwdp_scale=calibrated_scale)
                emit(f"{pair}, the client's {full} rounds and {cal}", fe,
                     _runs(s, band, "dwdp", fa, fcal, dc, (n_dw,))[0])
        # every effect at once: the recipe's context servers, the KV contention, the paper's pair over the client's
        # rounds, and (with the calibration) DWDP at the paper's context speedup
        ast = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * full, **RECIPE_CTX)
        aa = _arrivals(8192, 1024, ast)
        dw_all = Setting(isl_dist="uniform_ratio", users=band.users, prompts=band.users * full, **RECIPE_CTX,
                         kv_contention=True, dwdp_scale=calibrated_scale or 1.0)
        emit(f"all at once: {pair}, the client's {full} rounds, the recipe's context servers, the KV contention"
             + (f" and DWDP's context iteration x {calibrated_scale:.3f}" if cal else ""),
             _runs(s, band, "dep", aa, ast, dc, (n_dep,))[0], _runs(s, band, "dwdp", aa, dw_all, dc, (n_dw,))[0])
    return rows


# ------------------------------------------------------------------------------------------ aiconfigurator
#: aiconfigurator 0.12.0's static context estimate of one DEP8 rank of DeepSeek-R1 FP8 on H200 (h200_sxm, TensorRT-LLM
#: 1.3.0rc20 tables; fp8_block MoE with power_law_1.01 routing, NCCL all-gather + reduce-scatter): whole-model TTFT in
#: ms of one iteration of `batch` requests of `isl` tokens per rank (61 layers + embedding + logits), from
#: `aiconfigurator cli estimate --estimate-mode static_ctx` (deepseek-ai/DeepSeek-R1, tp 1, attention DP 8, EP 8,
#: OSL 1, batch_size = batch), run 2026-12-03
AIC_DEP8_TTFT_MS = {(4096, 4): 3524, (8192, 2): 3745, (16384, 1): 4198, (4096, 8): 7041, (8192, 4): 7218,
                    (16384, 2): 8489, (32768, 1): 9835}
AIC_TOL = 0.10  # the agreement asked of the DEP context iteration under aiconfigurator's own assumptions
#: aiconfigurator 0.12.0's static context estimate of one TP8 context server (tp 8, attention DP 1, MoE EP 8) of the
#: same model and tables: whole-model TTFT in ms of one iteration of `batch` requests of `isl` tokens, from
#: `aiconfigurator cli estimate --estimate-mode static_ctx --isl 8192 --osl 1 --batch-size 1 --tp-size 8
#: --attention-dp-size 1 --moe-tp-size 1 --moe-ep-size 8` (docs/bench_results/aiconfigurator_2026-12-07/
#: static_ctx_isl8192_tp8dp1ep8_b1.log: 316.484 ms, its per-op breakdown beside it), run 2026-12-07
AIC_TP8_TTFT_MS = {(8192, 1): 316}
#: the ablations of our TP8 iteration: TpCost switch -> what it changes
TP_ABLATIONS = {"fast_end": "attention, shared experts and router at one GPU's rows / 8 (TP's fast end)",
                "nccl_allreduce": "NCCL reduce-scatter + all-gather instead of TensorRT-LLM's AllReduce rows"}


def aic_spec(routing: bool = True, comm: bool = True) -> PlanSpec:
    """DeepSeek-R1 FP8 on H200 at TensorRT-LLM's tables; routing: aiconfigurator's power_law_1.01 (else balanced);
    comm: its NCCL all-gather + reduce-scatter (else the planner's default DEP path on H200, DeepEP)."""
    from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig
    return PlanSpec(model=PRESETS["deepseek-r1"], gpu=get_gpu("h200"), weight_dtype="fp8", target="trtllm",
                    dep_comm="allgather_reducescatter" if comm else None,
                    routing_skew=RoutingSkewConfig(kind="power_law", alpha=1.01) if routing else None)


def dep8_iteration_ms(s: PlanSpec, isl: int, batch: int) -> float:
    """One DEP8 context iteration (every rank `batch` whole requests of `isl` tokens), the simulator's price."""
    from dwdp_trtllm.sizing.context_cost import Segments
    return ContextCost(s, "dep", 8).seconds([Segments(tuple((0, isl, isl) for _ in range(batch)))] * 8) * 1e3


def tp8_iteration_ms(s: PlanSpec, isl: int, batch: int, **switches) -> float:
    """One TP8 context iteration (`batch` whole requests of `isl` tokens), the simulator's price; `switches`: TpCost's
    ablation switches set on."""
    from dwdp_trtllm.sizing.context_cost import Segments
    from dwdp_trtllm.sizing.tp_cost import TpCost
    c = TpCost(s, "tp", 8)
    for k, v in switches.items():
        setattr(c, k, v)
    return c.seconds([Segments(tuple((0, isl, isl) for _ in range(batch)))]) * 1e3


def aic_rows() -> list[Row]:
    """aiconfigurator's DEP8 context iteration against ours under its assumptions; ablations: each assumption alone
    back at our default, and both (the default `dwdp size` prices). Then its TP8 iteration against ours under the
    same assumptions; ablations: each of TpCost's two earlier defaults, and the two together (the earlier TP
    pricing)."""
    specs = {"": aic_spec(), "balanced routing instead of power_law_1.01": aic_spec(routing=False),
             "DeepEP (our H200 default) instead of NCCL all-gather + reduce-scatter": aic_spec(comm=False),
             "both: balanced routing and DeepEP (dwdp size's defaults)": aic_spec(False, False)}
    rows = []
    for (isl, b), ms in AIC_DEP8_TTFT_MS.items():
        name = f"aiconfigurator DEP8, {b} x {isl // 1024}K per rank"
        for effect, sx in specs.items():
            ours = dep8_iteration_ms(sx, isl, b)
            rows.append(Row(name, "context iteration, ms", float(ms), ours,
                            "" if effect else f"{ours / ms:.2f}x aiconfigurator's", tol=AIC_TOL,
                            kind="ablation" if effect else "compare", of=name if effect else "", effect=effect))
    tp = {"": {}, **{e: {k: True} for k, e in TP_ABLATIONS.items()},
          "the TP pricing before TensorRT-LLM's TP rows were read: the two above together": dict.fromkeys(TP_ABLATIONS,
                                                                                                       True)}
    for (isl, b), ms in AIC_TP8_TTFT_MS.items():
        name = f"aiconfigurator TP8, {b} x {isl // 1024}K"
        for effect, sw in tp.items():
            ours = tp8_iteration_ms(aic_spec(), isl, b, **sw)
            rows.append(Row(name, "context iteration, ms", float(ms), ours,
                            "" if effect else f"{ours / ms:.2f}x aiconfigurator's", tol=AIC_TOL,
                            kind="ablation" if effect else "compare", of=name if effect else "", effect=effect))
    return rows


def render_ms(rows: list[Row]) -> str:
    """render() for rows in ms (whole numbers)."""
    out = ["| row | published (aiconfigurator) | ours | verdict |", "|---|---|---|---|"]
    for r in rows:
        name = f"{r.of}, ablation: {r.effect}" if r.effect else r.row
        out.append(f"| {name} | {r.published:,.0f} | {r.ours:,.0f} | {verdict(r, rows)} |")
    return "\n".join(out)


# -------------------------------------------------------------------------------- aiconfigurator's questions
#: aiconfigurator 0.12.0's answers to its own sizing questions (package data; how they were obtained: the file's header)
AICQ_PATH = Path(__file__).resolve().parents[1] / "dwdp_trtllm" / "data" / "validation" / "aiconfigurator_questions.yaml"
#: the agreement asked of TTFT, TPOT, TPS/GPU and TPS/user (GPUs: equal)
AICQ_TOL = TOL
#: aiconfigurator's TTFT rule: its static prefill latency x this factor must be under the TTFT SLO ("TTFT
#: pre-correction for queueing under concurrency": aiconfigurator/sdk/sweep.py `_AUTOSCALE_TTFT_CORRECTION_FACTOR`,
#: applied in `_find_best_disagg_under_constraint`, aiconfigurator 0.12.0); the TTFT it prints is that product
AIC_TTFT_FACTOR = 1.8
#: aiconfigurator's prefill latency correction: its static prefill latency x this before its SLO filter and rate
#: matching (ai-dynamo/aiconfigurator src/aiconfigurator/sdk/task_v2.py @ 095f58a5, `Task.prefill_latency_correction`
#: = 1.1; src/aiconfigurator/cli/api.py `DEFAULT_PREFILL_LATENCY_CORRECTION_SCALE` the same): its printed TTFT is
#: static x 1.1 x 1.8 (TP8 at ISL 8K: 316.5 ms x 1.98 = 626.6 ms, static_ctx_isl8192_tp8dp1ep8_b1.log)
AIC_PREFILL_CORRECTION = 1.1
#: aiconfigurator's rate matching counts this share of its prefill workers' static rate (batch / latency) when it
#: matches them to the decode workers (aiconfigurator/sdk/sweep.py `_RATE_MATCH_PREFILL_DEGRADATION`, used in
#: `_rate_match_dict`: seq/s = min(prefill seq/s x workers x 0.9, decode seq/s x workers x 0.92), 0.12.0): its answer's
#: req/s at 8K / 64 GPUs is 4 TP8 workers x 1 / 0.348 s x 0.9 = 10.34
AIC_PREFILL_DEGRADATION = 0.9
#: generation batches per rank tried (a grid, not aiconfigurator's picks)
AICQ_GEN_BATCH = "2,4,6,8,12,16,24,32,48,64,128"


@dataclass(frozen=True)
class QRow:
    """One figure of one question: aiconfigurator's answer against `dwdp size`'s. kind: compare, ablation (one
    assumption changed; `effect` names it) or info; tol None: the figure must be equal (GPUs)."""

    question: str
    quantity: str
    aic: float | None
    ours: float | None
    tol: float | None = AICQ_TOL
    kind: str = "compare"
    effect: str = ""
    detail: str = ""


def aicq_agrees(r: QRow) -> bool:
    if r.aic is None or r.ours is None:
        return r.aic is None and r.ours is None
    return r.ours == r.aic if r.tol is None else within(r.aic, r.ours, r.tol)


def aicq_verdict(r: QRow, rows: list[QRow] = ()) -> str:
    """GPUs: equal or not; other figures: within the row's tolerance or not; a disagreeing row counts as explained
    only beside an ablation row of the same question and figure that agrees."""
    if r.kind == "info":
        return "no aiconfigurator value"
    band = "equal" if r.tol is None else f"within {r.tol:.0%}"
    err = "" if r.tol is None or r.aic is None or r.ours is None else f" ({rel_error(r.aic, r.ours):+.0%})"
    ok = aicq_agrees(r)
    if r.kind == "ablation":
        return f"ablation: {'agrees' if ok else 'still differs'}{err}"
    if ok:
        return f"{band}{err}" if r.aic is not None else "both: none"
    fixes = [a for a in rows if a.kind == "ablation" and a.question == r.question and a.quantity == r.quantity
             and aicq_agrees(a)]
    head = ("DIFFERENT" if r.tol is None else f"OUTSIDE {r.tol:.0%}") + err
    if fixes:
        return f"{head.lower()}; explained: {fixes[0].effect} gives {_qfmt(fixes[0].ours)}"
    return f"{head}, unexplained"


def aic_questions_data(path: Path = AICQ_PATH) -> dict:
    import yaml
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def aic_mode(parallel: str) -> str:
    """aiconfigurator's prefill parallel string -> our context mode: tpN (attention TP, EP experts) is a TP context
    server, tp1 with attention DP a DEP one."""
    return "tp" if not parallel.startswith("tp1pp") else "dep"


def aicq_argv(q: dict, data: dict) -> list[str]:
    """`dwdp size`'s arguments for question q under aiconfigurator's assumptions: its offered rate, fixed ISL / OSL,
    its TTFT SLO (as our median) and TPOT SLO (as TPS/user), its GPU budget, power_law_1.01 routing, NCCL
    all-gather + reduce-scatter, no MTP, DEP 8/16 and TP 8 context servers (its candidates), generation servers of
    8 or 16 GPUs (it deploys DEP16 generation; --gpus-per-node 16 lets ours), attention DP or TP and MoE TP 1/2
    (its decode candidates include attention TP 8 and TP x EP experts: tp8 / etp2ep4)."""
    a = q["answer"]
    return ["--rate", f"{a['req_s']:g}", "--isl", str(q["isl"]), "--isl-dist", "fixed", "--osl", str(q["osl"]),
            "--osl-dist", "fixed", "--ttft-p50", f"{data['ttft_ms'] / 1e3:g}", "--tps-user", f"{1e3 / data['tpot_ms']:.2f}",
            "--gpu-budget", str(q["total_gpus"]), "--routing-skew", "power_law_1.01",
            "--dep-comm", "allgather_reducescatter", "--mtp", "0", "--dep-size", "8,16", "--tp-size", "8",
            "--gen-tp", "8,16", "--gpus-per-node", "16", "--gen-batch", AICQ_GEN_BATCH, "--dwdp-size", "8",
            "--gen-moe-tp", "1,2", "--gen-attn-tp", "1,8"]


def size_outcomes(argv: list[str], modes: tuple[str, ...] = ("dep", "tp"), **override) -> dict:
    """`dwdp size argv`'s outcomes of the given context modes, through the command's own parser, problem builder and
    search (commands/size.py); `override`: Problem fields changed (an ablation). DWDP is left out: each mode's
    search is its own (search.search), so the DEP and TP columns equal `dwdp size argv`'s."""
    import argparse
    import dataclasses
    from dwdp_trtllm.commands import size as sz
    from dwdp_trtllm.sizing import search as se
    ap = argparse.ArgumentParser()
    sz.add_parser(ap.add_subparsers())
    args = ap.parse_args(["size", *argv])
    s, probs = sz.problems(args)
    dc = decode_cost(s.model, s.gpu.name, s.weight_dtype, *sz.mtp_setting(args, s.model), **stated_pricing(s))
    keep = {"dwdp_sizes": (), "dep_sizes": (), "tp_sizes": ()}
    for m in modes:
        keep.pop(f"{m}_sizes")
    p = dataclasses.replace(probs[0][1], **keep, **override)
    return se.search(p, dc)


def aicq_shape_argv(a: dict) -> list[str] | None:
    """The flags that pin `dwdp size`'s search to aiconfigurator's answer's shape: its context server size (DEP:
    attention DP x EP; TP: tensor parallel), its generation server size, attention TP, MoE TP and batch per
    attention group (aiconfigurator's `tpApp1dpDetpEepF` decode string: attention TP A, MoE TP E). None where its
    decode attention TP is neither 1 nor the whole server (ours price those two)."""
    p, g = a["prefill"], a["decode"]
    par = re.fullmatch(r"tp(\d+)pp1dp(\d+)etp(\d+)ep(\d+)", g["parallel"])
    if par is None:
        return None
    attn, moe = int(par[1]), int(par[3])
    if attn not in (1, g["gpus_per_worker"]):
        return None
    mode = aic_mode(p["parallel"])
    size = str(p["gpus_per_worker"])
    return (["--dep-size", size, "--tp-size", "0"] if mode == "dep" else ["--dep-size", "8", "--tp-size", size]) + \
        ["--gen-tp", str(g["gpus_per_worker"]), "--gen-batch", str(g["batch_per_rank"]),
         "--gen-attn-tp", str(attn), "--gen-moe-tp", str(moe), "--gpus-per-node", str(max(16, g["gpus_per_worker"]))]


#: bisection steps of max_rate_within (the rate to 1/16 of the bracket)
AICQ_RATE_STEPS = 4


def max_rate_within(argv: list[str], mode: str, lo: float, at_lo, hi: float, steps: int = AICQ_RATE_STEPS):
    """aiconfigurator's question the way it answers `--total-gpus G` (the most throughput within G GPUs, the rate an
    output): the highest offered rate in [lo, hi] at which `dwdp size argv` (its budget G) still answers in `mode`,
    by bisection (an answer at `lo` is `at_lo`); (rate, Outcome)."""
    best = (lo, at_lo)
    for _ in range(steps):
        mid = (lo + hi) / 2
        o = size_outcomes(_override(argv, ["--rate", f"{mid:.4g}"]), (mode,))[mode]
        if o.deployment is not None:
            lo, best = mid, (float(f"{mid:.4g}"), o)
        else:
            hi = mid
    return best


@contextlib.contextmanager
def context_scaled(mode: str, factor: float):
    """Inside: every context iteration of `mode` the search simulates priced x `factor` (an ablation that sets our
    iteration to a reference's price; sizing/search.py's `_costs` wrapped, restored on exit)."""
    from dwdp_trtllm.sizing import search as se
    real = se._costs

    def scaled(p, m, group, redundant, which="nominal"):
        cost, ctx = real(p, m, group, redundant, which)
        return (cost, (lambda st, segs: ctx(st, segs) * factor)) if m == mode else (cost, ctx)
    se._costs = scaled
    try:
        yield
    finally:
        se._costs = real


def tp_static_ms(argv: list[str], size: int, isl: int) -> float:
    """Our TP-`size` context iteration of one request of `isl` tokens (ms) priced as `dwdp size argv` prices it (its
    spec: routing and communication as stated): the quantity aiconfigurator's static prefill latency is."""
    from dwdp_trtllm.commands import size as sz
    from dwdp_trtllm.sizing.context_cost import Segments
    from dwdp_trtllm.sizing.tp_cost import TpCost
    ap = argparse.ArgumentParser()
    sz.add_parser(ap.add_subparsers())
    spec, _ = sz.problems(ap.parse_args(["size", *argv]))
    return TpCost(spec, "tp", size).seconds([Segments(((0, isl, isl),))]) * 1e3


def _override(argv: list[str], extra: list[str]) -> list[str]:
    """argv with the flags in `extra` replaced (each flag once)."""
    out, skip = [], set(extra[::2])
    it = iter(argv)
    for flag in it:
        val = next(it)
        if flag not in skip:
            out += [flag, val]
    return out + extra


def _qfmt(x) -> str:
    return "none" if x is None else f"{x:,.0f}" if float(x).is_integer() else f"{x:,.3g}"


def _figures(name: str, a: dict | None, o, kind: str = "compare", effect: str = "", detail: str = "") -> list[QRow]:
    """GPUs / TTFT (ours: median) / TPOT / TPS/GPU / TPS/user of one answer against ours (Outcome)."""
    m, d = o.metrics, o.deployment
    pick = (lambda k: None) if a is None else a.get
    ours = {} if d is None else {"GPUs": float(d.gpus), "TTFT, ms": m.ttft_p50_s * 1e3, "TPOT, ms": m.tpot_s * 1e3,
                                 "TPS/GPU": m.output_tps_per_gpu, "TPS/user": m.tps_user}
    theirs = {"GPUs": pick("gpus"), "TTFT, ms": pick("ttft_ms"), "TPOT, ms": pick("tpot_ms"),
              "TPS/GPU": pick("tps_gpu"), "TPS/user": pick("tps_user")}
    out = []
    for k in ("GPUs", "TTFT, ms", "TPOT, ms", "TPS/GPU", "TPS/user"):
        v = theirs[k]
        out.append(QRow(name, k, None if v is None else float(v), ours.get(k), None if k == "GPUs" else AICQ_TOL,
                        kind, effect, detail if k == "GPUs" else ""))
    return out


def _label(d) -> str:
    if d is None:
        return "none"
    shape = f" {d.gen_shape()}" if d.gen_shape() else ""
    return f"{d.ctx_short()} + {d.gen_servers} x gen{d.gen_tp}{shape} b{d.gen_batch}"


def _aic_label(a: dict | None) -> str:
    if a is None:
        return "none"
    p, g = a["prefill"], a["decode"]
    return f"{p['workers']} x {p['parallel']} + {g['workers']} x {g['parallel']} b{g['batch_per_rank']}"


def aic_questions(data: dict | None = None) -> list[QRow]:
    """Each of aiconfigurator's questions: its answer (its own context mode) against `dwdp size`'s answer of the
    same context mode under its assumptions (aicq_argv); then its DEP-restricted answer against our DEP answer.
    Ablations: its TTFT without its x1.8; its deployment shape pinned (aicq_shape_argv), and where that has no
    answer of ours its generation shape alone; where ours uses fewer GPUs, its question as it answers it (the most
    requests/s within its budget, max_rate_within), for a TP answer also with our TP iteration at its static
    prefill latency and at its rate-matched prefill price (AIC_PREFILL_DEGRADATION; context_scaled); where one side
    found a DEP context and the other not, its TTFT rule."""
    data = aic_questions_data() if data is None else data
    rows = []
    for q in data["questions"]:
        argv = aicq_argv(q, data)
        out = size_outcomes(argv)
        a = q["answer"]
        mode = aic_mode(a["prefill"]["parallel"])
        o = out[mode]
        rows += _figures(f"{q['name']}", a, o, detail=f"aiconfigurator: {_aic_label(a)}; ours ({mode.upper()}): "
                                                        f"{_label(o.deployment)}" + (f" ({o.why_none})" if o.deployment is None else ""))
        if o.metrics is not None:  # its TTFT is its static prefill latency x AIC_TTFT_FACTOR; ours a simulated median
            rows.append(QRow(q["name"], "TTFT, ms", a["ttft_ms"] / AIC_TTFT_FACTOR, o.metrics.ttft_p50_s * 1e3,
                             AICQ_TOL, "ablation", f"aiconfigurator's TTFT without its x{AIC_TTFT_FACTOR:g} queueing "
                                                   f"factor (its static prefill latency x its "
                                                   f"{AIC_PREFILL_CORRECTION:g} prefill correction)"))
        shape = aicq_shape_argv(a)
        if shape is not None:  # the same question with aiconfigurator's deployment shape: what the shape moves
            o2 = size_outcomes(_override(argv, shape), (mode,))[mode]
            rows += _figures(q["name"], a, o2, "ablation", "aiconfigurator's deployment shape ("
                             + " ".join(shape) + ")", f"ours: {_label(o2.deployment)}"
                             + (f" ({o2.why_none})" if o2.deployment is None else ""))
            gen = shape[shape.index("--gen-tp"):]
            if o2.deployment is None:  # its context shape has no answer of ours: its generation side alone
                o6 = size_outcomes(_override(argv, gen), (mode,))[mode]
                rows += _figures(q["name"], a, o6, "ablation", "aiconfigurator's generation shape, our context "
                                 "search (" + " ".join(gen) + ")", f"ours: {_label(o6.deployment)}"
                                 + (f" ({o6.why_none})" if o6.deployment is None else ""))
        if o.deployment is not None and o.deployment.gpus < a["gpus"]:  # it answers with its whole budget
            hi = a["req_s"] * a["gpus"] / o.deployment.gpus * 1.25
            r, o4 = max_rate_within(argv, mode, a["req_s"], o, hi)
            rows += _figures(q["name"], a, o4, "ablation", f"aiconfigurator's question as it answers it: the most "
                             f"requests/s within --gpu-budget {q['total_gpus']} (ours {r:.3g} req/s, "
                             f"bisected over --rate)", f"ours: {_label(o4.deployment)} at {r:.3g} req/s")
            if mode == "tp":  # and with our TP context iteration at its static prefill price (and rate-matched)
                size = a["prefill"]["gpus_per_worker"]
                ours_ms, theirs_ms = tp_static_ms(argv, size, q["isl"]), a["ttft_ms"] / AIC_TTFT_FACTOR
                for f, what in ((AIC_PREFILL_CORRECTION, f"x its {AIC_PREFILL_CORRECTION:g} prefill latency "
                                                          f"correction (our {ours_ms:.0f} ms"),
                                (theirs_ms / ours_ms, f"at its prefill latency ({theirs_ms:.0f} ms: its static "
                                                      f"{theirs_ms / AIC_PREFILL_CORRECTION:.0f} ms x its "
                                                      f"{AIC_PREFILL_CORRECTION:g} correction, at ISL "
                                                      f"{q['isl'] // 1024}K against our {ours_ms:.0f}"),
                                (theirs_ms / AIC_PREFILL_DEGRADATION / ours_ms,
                                 f"at its rate-matched prefill price (its {theirs_ms:.0f} ms / its "
                                 f"{AIC_PREFILL_DEGRADATION:g} prefill degradation against our {ours_ms:.0f}")):
                    with context_scaled("tp", f):
                        o5 = size_outcomes(argv, (mode,))[mode]
                        r5, o5 = (max_rate_within(argv, mode, a["req_s"], o5, hi) if o5.deployment
                                  else (a["req_s"], o5))
                    rows += _figures(q["name"], a, o5, "ablation", f"aiconfigurator's question as it answers it, "
                                     f"our TP{size} context iteration {what}: x {f:.2f})",
                                     f"ours: {_label(o5.deployment)} at {r5:.3g} req/s")
        if mode != "dep":
            dep = out["dep"]
            name = f"{q['name']}, DEP context"
            rows += _figures(name, q.get("dep_context"), dep,
                             detail=f"aiconfigurator: {q.get('dep_context_why', '')}; ours: {_label(dep.deployment)}"
                                    + (f" ({dep.why_none})" if dep.deployment is None else ""))
            if (dep.deployment is None) != (q.get("dep_context") is None):  # one side found a DEP context, one not
                # its rule on our static price: x its prefill correction x its queueing factor, held to its SLO
                slo = f"{data['ttft_ms'] / 1e3 / AIC_TTFT_FACTOR / AIC_PREFILL_CORRECTION:.2f}"
                o3 = size_outcomes(_override(argv, ["--ttft-p50", slo]), ("dep",))["dep"]
                rows += _figures(name, q.get("dep_context"), o3, "ablation",
                                 f"aiconfigurator's TTFT rule (its TTFT is its static prefill latency x "
                                 f"{AIC_PREFILL_CORRECTION:g} x {AIC_TTFT_FACTOR:g}, held to {data['ttft_ms'] / 1e3:g} "
                                 f"s: --ttft-p50 {slo})",
                                 f"ours: {_label(o3.deployment)}" + (f" ({o3.why_none})" if o3.deployment is None else ""))
    return rows


def render_questions(rows: list[QRow]) -> str:
    out = ["| question | figure | aiconfigurator | ours | verdict |", "|---|---|---|---|---|"]
    for r in rows:
        name = f"{r.question}, ablation: {r.effect}" if r.effect else r.question
        out.append(f"| {name} | {r.quantity} | {_qfmt(r.aic)} | {_qfmt(r.ours)} | {aicq_verdict(r, rows)} |")
    details = [f"- {r.question}{', ablation: ' + r.effect if r.effect else ''}: {r.detail}" for r in rows if r.detail]
    return "\n".join(out + [""] + details)


# -------------------------------------------------------------------------------------------------------- docs
BEGIN = "<!-- size_validate.py: begin (generated; edit scripts/size_validate.py) -->"
END = "<!-- size_validate.py: end -->"
AIC_BEGIN = "<!-- size_validate.py aiconfigurator: begin (generated; edit scripts/size_validate.py) -->"
AIC_END = "<!-- size_validate.py aiconfigurator: end -->"
AICQ_BEGIN = "<!-- size_validate.py aiconfigurator questions: begin (generated; edit scripts/size_validate.py) -->"
AICQ_END = "<!-- size_validate.py aiconfigurator questions: end -->"


def section(rows: list[Row], begin: str = BEGIN, end: str = END, table=render) -> str:
    return "\n".join([begin, "", table(rows), "", end])


def write(path: Path, text: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the generated section of `path` (between `begin` and `end`) with `text`."""
    doc = path.read_text(encoding="utf-8")
    pat = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pat.search(doc):
        raise SystemExit(f"{path}: no generated section ({begin!r} ... {end!r})")
    path.write_text(pat.sub(lambda _: text, doc), encoding="utf-8")


def _band_rows(job: tuple) -> list[Row]:
    """One band's table56 rows (a worker process of `table56_jobs`)."""
    rounds_cap, calibrated_scale, i = job
    return table56(spec(), rounds_cap=rounds_cap, calibrated_scale=calibrated_scale, bands=(BANDS[i],))


def table56_jobs(rounds_cap: int | None, calibrated_scale: float | None, jobs: int) -> list[Row]:
    """table56 over every band, `jobs` bands at a time in worker processes: the same rows in the same order (each
    band's runs are independent: every run prices its own ContextCost)."""
    if jobs <= 1:
        return table56(spec(), rounds_cap=rounds_cap, calibrated_scale=calibrated_scale)
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(jobs) as ex:
        parts = list(ex.map(_band_rows, [(rounds_cap, calibrated_scale, i) for i in range(len(BANDS))]))
    return [r for part in parts for r in part]


def splice_rows(doc: str, rows: list[Row], keep_prefix: str | tuple[str, ...] = "| Table 3",
                kept_first: bool = True) -> str:
    """`doc`'s generated section with its table's lines that start with `keep_prefix` kept (in their order) and
    every other row replaced by `rows` rendered: regenerates the Table 5/6 rows alone (the kept Table 3 rows first)
    or, with keep_prefix ("| Table 5", "| Table 6") and kept_first False, the Table 3 rows alone (before the kept
    rows). The kept rows' verdicts read only rows of their own table (`verdict`), so they do not depend on the
    replaced ones; tests/unit/test_size_validate.py checks the Table 3 rows against the script."""
    pat = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    m = pat.search(doc)
    if not m:
        raise SystemExit(f"no generated section ({BEGIN!r} ... {END!r})")
    kept = [line for line in m.group(0).splitlines() if line.startswith(keep_prefix)]
    lines = render(rows).splitlines()
    body = [*kept, *lines[2:]] if kept_first else [*lines[2:], *kept]
    text = "\n".join([BEGIN, "", *lines[:2], *body, "", END])
    return pat.sub(lambda _: text, doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="regenerate this markdown file's validation section")
    ap.add_argument("--quick", action="store_true", help="fewer prompts (a look, not the docs)")
    ap.add_argument("--only", choices=("3", "5", "aic", "aicq"), help="one table group (aicq: aiconfigurator's "
                                                                     "sizing questions)")
    ap.add_argument("--jobs", type=int, default=1, help="Table 5/6 bands simulated at once (worker processes)")
    args = ap.parse_args(argv)
    if args.write and args.quick:
        ap.error("--write regenerates whole sections: not with --quick (--only 3 / --only 5 splice their rows "
                 "beside the file's other rows; aic and aicq are sections of their own)")
    s = spec()
    rows: list[Row] = []
    if args.only in (None, "3"):
        rows += table3(s, prompts=512 if args.quick else T3_PROMPTS)
    if args.only in (None, "5"):
        sp8, _, _ = ttft_speedup(s, 8192, 4, Setting(prompts=1024))  # Table 3a's ISL-8K setting
        rows += table56_jobs(2 if args.quick else None, sp8 / T3A[8192], args.jobs)
    if rows:
        text = section(rows)
        print(text)
        if args.write and args.only in ("3", "5"):
            doc = args.write.read_text(encoding="utf-8")
            doc = (splice_rows(doc, rows) if args.only == "5" else
                   splice_rows(doc, rows, ("| Table 5", "| Table 6"), kept_first=False))
            args.write.write_text(doc, encoding="utf-8")
        elif args.write:
            write(args.write, text)
    if args.only in (None, "aic"):
        text = section(aic_rows(), AIC_BEGIN, AIC_END, render_ms)
        print(text)
        if args.write:
            write(args.write, text, AIC_BEGIN, AIC_END)
    if args.only in (None, "aicq"):
        text = section(aic_questions(), AICQ_BEGIN, AICQ_END, render_questions)
        print(text)
        if args.write:
            write(args.write, text, AICQ_BEGIN, AICQ_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
