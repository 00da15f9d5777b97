#!/usr/bin/env python3
"""The deployment matrix of docs/PLANNER.md section "Deployments on H200": `dwdp plan` for DeepSeek-R1 FP8 and
Qwen3-235B-A22B FP8 on 8x and 4x H200, MNT 8K / 16K / 32K, ISL 4K-32K, both targets, as markdown.

Every cell is what `dwdp plan --model M --gpu h200 --weight-dtype fp8 --dwdp-size G --mnt MNT
--isl 4096,8192,16384,32768 --target T [--json]` prints (the same parser and build_spec); ISL fixed, balanced
routing, no rank imbalance. The engine target reads the floor campaign shipped in dwdp_trtllm/data/engine_calibration
(the output names it; main(bench_results=DIR) reads DIR instead, as `--bench-results DIR` does: the campaign
scripts/dev/adopt_floor_campaign.py is about to ship); the trtllm target reads only the shipped kernel tables.

    python3 scripts/plan_matrix.py > /tmp/matrix.md
"""
from __future__ import annotations

import sys
from pathlib import Path

from dwdp_trtllm.cli import build_parser
from dwdp_trtllm.commands import plan as plan_cmd
from dwdp_trtllm.perf.planner import plan
from dwdp_trtllm.perf.recommend import recommend

MODELS = ("deepseek-r1", "qwen3-235b-a22b")
GROUPS = (8, 4)
MNTS = (8192, 16384, 32768)
ISLS = (4096, 8192, 16384, 32768)
TARGETS = ("trtllm", "engine")


def run(model: str, g: int, mnt: int, target: str, bench_results: Path | None = None):
    argv = ["plan", "--model", model, "--gpu", "h200", "--weight-dtype", "fp8", "--dwdp-size", str(g), "--mnt",
            str(mnt), "--isl", ",".join(map(str, ISLS)), "--target", target]
    if bench_results is not None and target == "engine":
        argv += ["--bench-results", str(bench_results)]
    args = build_parser().parse_args(argv)
    spec = plan_cmd.build_spec(args)
    rows = plan(spec)
    # one (rows, recommendation) per DEP the plan compares against (`--dep`: TensorRT-LLM's, DeepEP + DeepGEMM)
    by_variant = {v: [r for r in rows if r.dep_variant == v] for v in spec.dep_variants}
    return spec, {v: (rs, recommend(spec, rs)) for v, rs in by_variant.items() if rs}


def _k(x: float) -> str:
    return "never" if x == float("inf") else f"{x / 1000:.1f}K"


def main(bench_results: Path | None = None) -> int:
    """The matrix on stdout; `bench_results`: the engine target's floor campaign directory (default the shipped one)."""
    out = sys.stdout
    out.write("| model | GPUs | MNT | target | DEP | " + " | ".join(f"ISL {i // 1024}K" for i in ISLS) + " | recommendation |\n")
    out.write("|---|---|---|---|---|" + "---|" * len(ISLS) + "---|\n")
    breakeven: dict = {}
    campaign = None
    for model in MODELS:
        for g in GROUPS:
            for mnt in MNTS:
                for target in TARGETS:
                    spec, variants = run(model, g, mnt, target, bench_results)
                    if target == "engine" and spec.calibration.floor.campaign:
                        campaign = spec.calibration.floor.campaign
                    for variant, (rows, rec) in variants.items():
                        if not rows[0].fits:
                            cells = [f"✗ {rows[0].memory_per_rank_gb:.0f} GB"] * len(ISLS)
                        else:
                            cells = []
                            for r in rows:
                                mark = "†" if r.extrapolated else ""
                                cells.append(f"{r.speedup:.2f}{mark} ({r.speedup_low:.2f}-{r.speedup_high:.2f}) {r.verdict}")
                                if variant == spec.dep_variants[0]:
                                    breakeven[(model, g, target, r.isl)] = r
                        verdict = rec.verdict + (f" ({rec.depends_on})" if rec.verdict == "marginal" else "")
                        if rec.verdict == "nothing fits":
                            verdict = "nothing fits: " + rec.reason.split("; ")[-1]
                        out.write(f"| {model} | {g}x H200 | {mnt // 1024}K | {target} | {variant} | " + " | ".join(cells)
                                  + f" | {verdict} |\n")
    out.write("\nBreak-even tokens per rank per iteration that hide the prefetch (nominal, range over the "
              "uncertain inputs); requests of that ISL (fewer tokens: a chunk of one):\n\n")
    out.write("| model | GPUs | target | " + " | ".join(f"ISL {i // 1024}K" for i in ISLS) + " |\n")
    out.write("|---|---|---|" + "---|" * len(ISLS) + "\n")
    for model in MODELS:
        for g in GROUPS:
            for target in TARGETS:
                rs = [breakeven.get((model, g, target, i)) for i in ISLS]
                if not any(rs):
                    continue
                out.write(f"| {model} | {g}x H200 | {target} | " + " | ".join(
                    f"{_k(r.break_even_tokens)} ({_k(r.break_even_range[0])}-{_k(r.break_even_range[1])})" if r else "-"
                    for r in rs) + " |\n")
    if campaign:
        out.write(f"\nengine target calibrated by the floor campaign {campaign.rstrip('/').split('/')[-1]} "
                  "(shipped: dwdp_trtllm/data/engine_calibration).\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
