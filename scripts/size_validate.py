#!/usr/bin/env python3
"""`dwdp size`'s simulator against the paper's measured serving numbers (docs/SIZING.md, "Validation").

Paper setup (section 5.1): DeepSeek-R1, GB200 NVL72, NVFP4 MoE weights, FP8 KV cache, DWDP4 against DEP4 context
servers, MNT 32K, ISL uniform in [0.8, 1] x ISL; the planner's rows for the same setup are
data/validation/published.yaml's paper-t3-* (`--dep-comm alltoall --interference 1.19`), reused here.

- Table 3 (context only, TTFT speedup DEP/DWDP 1.11-1.27x over ISL 1K-32K): one DEP4 server against 4 DWDP4 ranks
  under the same closed loop of users (each rank's MNT worth of requests in flight), context-only simulation.
- Table 5 (end to end at 8K/1K, DWDP/DEP output TPS/GPU 1.10 / 1.08 / 1.10 / 1.06 / 0.97 at 20-30 / 40-50 / 60-70 /
  80-90 / 170-180 TPS/user): per generation setup (GPUs, batch per rank) the request rate that fills it, then per
  mode the fewest context GPUs that keep TTFT p99 under TTFT_P99_S (sizing/search.best_context); the ratio of
  output TPS/GPU at matched TPS/user (the generation side is the same for both modes, as in the paper).

Run: PYTHONPATH=. python3 scripts/size_validate.py  (several minutes on 2 CPU cores). Prints markdown rows.
"""
from __future__ import annotations

import sys
from dataclasses import replace

from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.sizing import traffic as tr
from dwdp_trtllm.sizing.decode_cost import decode_cost
from dwdp_trtllm.sizing.metrics import Slo, summarize
from dwdp_trtllm.sizing.search import Problem, best_context, run_deployment
from dwdp_trtllm.sizing.simulator import Deployment

T3_ISLS = (1024, 8192, 32768)  # published: TTFT speedup 1.11-1.27 over ISL 1K-32K
T5 = [((20, 30), 1.10), ((40, 50), 1.08), ((60, 70), 1.10), ((80, 90), 1.06), ((170, 180), 0.97)]
TTFT_P99_S = 10.0  # the end-to-end points' context sizing bound (the paper's Pareto points carry no TTFT target)
MNT = 32768
#: generation setups (GPUs, batches per rank) whose decode steps span 20-90 TPS/user on GB200 (decode_cost.py)
GEN_POINTS = ((4, (16, 64, 256)), (16, (1, 4, 16, 64)))


def spec() -> PlanSpec:
    return PlanSpec(model=PRESETS["deepseek-r1"], gpu=get_gpu("gb200"), weight_dtype="nvfp4", target="trtllm",
                    dep_comm="alltoall", interference=1.19)


def _problem(s, arrivals, slo=Slo()) -> Problem:
    return Problem(s, arrivals, slo, 512, 72, (4,), (4,), (MNT,), (4, 8, 16), (8, 16, 32, 64, 128, 256))


def table3(s) -> list[str]:
    rows = []
    for isl in T3_ISLS:
        users = 4 * max(1, MNT // isl)
        a = tr.generate(tr.Traffic(tr.LengthDist(isl, "uniform_ratio"), tr.LengthDist(1), concurrency=users,
                                   duration_s=60, seed=0))
        p = _problem(s, a)
        m = {}
        for mode, n in (("dwdp", 4), ("dep", 1)):
            d = Deployment(mode, 4, n, MNT, 1, 1, 1)
            r, _ = run_deployment(p, d, None, context_only=True)
            m[mode] = summarize(r, d.ctx_gpus, Slo())
        rows.append(f"| Table 3, ISL {isl} (closed loop, {users} users) | TTFT p50 DEP/DWDP | 1.11-1.27 | "
                    f"{m['dep'].ttft_p50_s / m['dwdp'].ttft_p50_s:.2f} (DWDP {m['dwdp'].ttft_p50_s:.2f} s, "
                    f"DEP {m['dep'].ttft_p50_s:.2f} s) |")
    return rows


def table5(s) -> list[str]:
    dc = decode_cost(s.model, "gb200", "nvfp4")
    isl, osl = 8192, 1024
    pts = {"dwdp": [], "dep": []}
    for tp, batches in GEN_POINTS:
        for b in batches:
            step = dc.step_ms(tp, b, isl + osl / 2) * 1e-3
            rate = tp * b / step / osl  # requests/s one generation server finishes at batch b
            a = tr.generate(tr.Traffic(tr.LengthDist(isl, "uniform_ratio"), tr.LengthDist(osl), rate=rate,
                                       duration_s=120, seed=0))
            p = _problem(s, a, Slo(None, TTFT_P99_S, None))
            for mode in ("dwdp", "dep"):
                ctx, _, _ = best_context(p, mode)
                if ctx is None:
                    continue
                d = replace(ctx, gen_tp=tp, gen_servers=1, gen_batch=b)
                m = summarize(run_deployment(p, d, dc)[0], d.gpus, Slo())
                pts[mode].append((m.tps_user, m.output_tps_per_gpu, d))
    rows = []
    for (lo, hi), pub in T5:
        def best(mode):
            inside = [(y, d) for x, y, d in pts[mode] if lo <= x <= hi]
            return max(inside, key=lambda t: t[0]) if inside else None
        w, e = best("dwdp"), best("dep")
        if w is None or e is None:
            got = "no simulated point in this TPS/user range (the decode tables' fastest step is slower)"
        else:
            got = (f"{w[0] / e[0]:.2f} (DWDP {w[0]:.0f} TPS/GPU with {w[1].ctx_gpus} ctx + {w[1].gen_gpus} gen GPUs, "
                   f"DEP {e[0]:.0f} with {e[1].ctx_gpus} + {e[1].gen_gpus})")
        rows.append(f"| Table 5, {lo}-{hi} TPS/user | output TPS/GPU DWDP/DEP | {pub:.2f} | {got} |")
    return rows


def main() -> int:
    s = spec()
    print("| row | quantity | published | simulated |\n|---|---|---|---|")
    for line in table3(s) + table5(s):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
