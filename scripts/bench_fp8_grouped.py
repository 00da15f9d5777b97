#!/usr/bin/env python3
"""The FP8 grouped GEMM on DeepSeek-R1 expert shapes: every CUTLASS variant of the multi_buffer op, the
scheduler knobs, and torch's `_scaled_grouped_mm`, side by side in one run; writes the production choice.

  variants  torch.ops.dwdp.grouped_gemm_fp8_tune(..., variant, raster, swizzle): the FP8 blockwise kernels of
            plugins/csrc/grouped_gemm_fp8_<variant>.cu (1x128 activation / 128x128 weight scales), weights read in
            place from two buffers, [LOCAL local | E - LOCAL slot] (the engine's DWDP split)
  op        torch.ops.dwdp.grouped_gemm, the production dispatch of this build (plugins/csrc/grouped_gemm_fp8_dispatch.h)
  torch     torch._scaled_grouped_mm with rowwise scales on one contiguous [E, N, K] buffer (the floor's kernel;
            torch 2.11 has no blockwise grouped recipe on sm_90)
Shapes: fc1 N=4096 K=7168 (gate|up), fc2 N=7168 K=2048 (down); E = 256 experts, top-8; T = 4K / 16K / 64K tokens
(R = 8 T rows); routing uniform or skewed (log-normal expert popularity, scripts/bench_grouped_gemm.counts_for).
Pass 1 times every variant with CUTLASS's default scheduler knobs (raster along M, swizzle 1); pass 2 times the
KNOBS on the two variants with the best geometric mean of pass 1 (per shape).
Checks, at every point for every variant: (a) BIT-EXACT: the multi_buffer output equals the same variant on one
contiguous [E, N, K] buffer (torch.equal); (b) whether it equals the incumbent variant's output bit for bit
(reported; decides whether a shape may split on T); (c) ||out - ref|| / ||ref|| < 1e-2 on three experts against
float32 products of the dequantised operands. A candidate must pass (a) and (c) everywhere to be chosen.
Timing: CUDA events around each call, median of n calls (n so that about --target-ms are timed, 3..100) after one
warm-up call, in --rounds interleaved rounds over the candidates of a point (torch and the op in every round); a
candidate's time is the median of its round medians. Random codes (never zeros). Writes <out>/fp8_grouped.json, .md and (--write-dispatch) the header.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped_gemm import counts_for  # noqa: E402
import fp8_dispatch_select as sel  # noqa: E402
from dwdp_trtllm.ops.build import load  # noqa: E402
from dwdp_trtllm.ops.reference import dequantize_fp8_blockwise  # noqa: E402
from dwdp_trtllm.bench.report import env_info, write_atomic  # noqa: E402

SHAPES = {"fc1": (4096, 7168), "fc2": (7168, 2048)}  # name -> (N, K)
E, TOPK = 256, 8
KNOBS = [(2, 0), (1, 2), (2, 2), (1, 4)]  # (raster 1 along M / 2 along N, max_swizzle_size)


def time_ms(fn, target_ms: float) -> float:
    fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn()
    e.record()
    torch.cuda.synchronize()
    n = max(3, min(100, int(target_ms / max(s.elapsed_time(e), 1e-3))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in ev)[n // 2]


def make_point(N, K, T, routing, dev, g, cpu_gen):
    c = counts_for(T, routing, cpu_gen)
    R = int(c.sum())
    f8 = torch.float8_e4m3fn
    return dict(T=T, routing=routing, R=R, counts=c, offs=c.cumsum(0).to(torch.int32).to(dev),
                a=(torch.randn(R, K, device=dev, generator=g) * 64).to(f8),
                sa=torch.rand(R, K // 128, device=dev, generator=g) * 1e-2 + 1e-3,
                sa_row=torch.rand(R, device=dev, generator=g) * 1e-2 + 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--tokens", default="4096,16384,65536")
    ap.add_argument("--routings", default="uniform,skewed")
    ap.add_argument("--variants", default="all", help="comma-separated variant names, or all (every one built)")
    ap.add_argument("--local", type=int, default=32, help="experts in the local buffer (the rest in the slot)")
    ap.add_argument("--target-ms", type=float, default=25, help="time timed per candidate per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per point")
    ap.add_argument("--no-knobs", action="store_true", help="skip pass 2 (scheduler knobs)")
    ap.add_argument("--write-dispatch", default="", help="write the chosen dispatch header to this path")
    args = ap.parse_args()

    load(cuda=True)
    op, tune = torch.ops.dwdp.grouped_gemm, torch.ops.dwdp.grouped_gemm_fp8_tune
    built = list(torch.ops.dwdp.grouped_gemm_fp8_variants())
    variants = built if args.variants == "all" else [v for v in args.variants.split(",") if v in built]
    missing = [] if args.variants == "all" else [v for v in args.variants.split(",") if v not in built]
    print(f"variants built: {built}; timed: {variants}; missing: {missing}", flush=True)
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)
    cpu_gen = torch.Generator().manual_seed(0)
    L, t0, bad = args.local, time.time(), []
    rows, base_rows = [], []
    for shape, (N, K) in SHAPES.items():
        f8 = torch.float8_e4m3fn
        w = torch.empty(E, N, K, device=dev, dtype=f8)
        for i in range(0, E, 16):  # codes of N(0, 1) * 64: the e4m3 range, no zeros
            w[i:i + 16] = (torch.randn(min(16, E - i), N, K, device=dev, generator=g) * 64).to(f8)
        ws = torch.rand(E, N // 128, K // 128, device=dev, generator=g) * 1e-3 + 1e-4
        w_local, w_slot = w[:L].clone(), w[L:].clone()  # two allocations, as the engine's local buffer and slot
        s_local, s_slot = ws[:L].clone(), ws[L:].clone()
        bidx = torch.tensor([0] * L + [1] * (E - L), dtype=torch.int32, device=dev)
        rrow = torch.tensor(list(range(L)) + list(range(E - L)), dtype=torch.int32, device=dev)
        bidx1, rrow1 = torch.zeros(E, dtype=torch.int32, device=dev), torch.arange(E, dtype=torch.int32, device=dev)
        w_KN = w.transpose(1, 2)
        sw_row = torch.rand(E, N, device=dev, generator=g) * 1e-3 + 1e-4
        pts = [make_point(N, K, int(T), rt, dev, g, cpu_gen) for T in args.tokens.split(",") for rt in args.routings.split(",")]
        for p in pts:  # the incumbent's output and the dequantised reference of three experts
            p["inc"] = tune(p["a"], p["offs"], [w_local, w_slot], bidx, rrow, p["sa"], [s_local, s_slot], sel.FALLBACK, 0, 0)
            ends, p["refs"] = p["offs"].tolist(), []
            for e in (0, L, E - 1):  # a local expert, the first slot expert, the last
                lo, hi = (ends[e - 1] if e else 0), ends[e]
                if hi > lo:
                    p["refs"].append((lo, hi, dequantize_fp8_blockwise(p["a"][lo:hi], p["sa"][lo:hi], (1, 128))
                                      @ dequantize_fp8_blockwise(w[e], ws[e]).t()))
            p["torch_run"] = (lambda p=p: torch._scaled_grouped_mm(p["a"], w_KN, p["sa_row"], sw_row, offs=p["offs"],
                                                                    out_dtype=torch.bfloat16))
            p["op_run"] = lambda p=p: op(p["a"], p["offs"], [w_local, w_slot], bidx, rrow, p["sa"], [s_local, s_slot])
            p["torch_ms"], p["op_ms"] = [], []
            base = dict(shape=shape, N=N, K=K, tokens=p["T"], rows=p["R"], E=E, routing=p["routing"],
                        max_expert_rows=int(p["counts"].max()),
                        op_choice=str(torch.ops.dwdp.grouped_gemm_fp8_choice(p["R"], E, N, K)))
            base_rows.append(base)
            p["base"] = base

        def check(p, v, raster, swizzle):
            """The candidate's correctness at point p (one call each way) and its timing closure."""
            run = lambda: tune(p["a"], p["offs"], [w_local, w_slot], bidx, rrow, p["sa"], [s_local, s_slot], v, raster, swizzle)  # noqa: E731
            out = run()
            contig = tune(p["a"], p["offs"], [w], bidx1, rrow1, p["sa"], [ws], v, raster, swizzle)
            exact, same = bool(torch.equal(out, contig)), bool(torch.equal(out, p["inc"]))
            err = max(float((out[lo:hi].float() - ref).norm() / ref.norm()) for lo, hi, ref in p["refs"])
            b = p["base"]
            r = dict(b, variant=v, raster=raster, swizzle=swizzle, bit_exact_contiguous=exact, same_as_fallback=same,
                     rel_err=err, ok=exact and err < 1e-2)
            if not r["ok"]:
                bad.append(f"{shape} T={p['T']} {p['routing']} {v} r{raster} s{swizzle}: exact={exact} err={err:.1e}")
            return r, run

        def timed(p, cands):
            """Interleaved rounds (every candidate once per round, torch and the op too): a slow spell of the GPU
            lands on every candidate alike; each candidate's time is the median over rounds of its per-round median."""
            checked = [check(p, *c) for c in cands]
            runs = [run for _, run in checked] + [p["torch_run"], p["op_run"]]
            per = [[] for _ in runs]
            for _ in range(args.rounds):
                for i, run in enumerate(runs):
                    per[i].append(time_ms(run, args.target_ms))
            med = [sorted(x)[len(x) // 2] for x in per]
            flop = 2.0 * p["R"] * N * K
            for (r, _), ms, spread in zip(checked, med, per):
                r.update(ms=ms, tflops=flop / ms / 1e9, ms_rounds=spread)
                rows.append(r)
                print(f"{shape} T={p['T']:6d} {p['routing']:7s} {r['variant']:18s} r{r['raster']} s{r['swizzle']} "
                      f"{r['tflops']:6.0f} TFLOP/s  exact={r['bit_exact_contiguous']} same={r['same_as_fallback']} "
                      f"err={r['rel_err']:.1e}  rounds {min(spread):.3f}-{max(spread):.3f} ms", flush=True)
            p["torch_ms"].extend(per[-2])
            p["op_ms"].extend(per[-1])

        for p in pts:
            timed(p, [(v, 0, 0) for v in variants])
        if not args.no_knobs:
            mine = [r for r in rows if r["shape"] == shape and r["raster"] == 0 and r["swizzle"] == 0 and r["ok"]]
            gm = {v: math.exp(sum(math.log(r["tflops"]) for r in mine if r["variant"] == v) / len(pts))
                  for v in {r["variant"] for r in mine} if sum(r["variant"] == v for r in mine) == len(pts)}
            top = sorted(gm, key=gm.get, reverse=True)[:2]
            for p in pts:
                timed(p, [(v, raster, swizzle) for v in top for raster, swizzle in KNOBS])
        for p in pts:  # torch and the op: median over every round they ran in
            b, flop = p["base"], 2.0 * p["R"] * N * K
            b["ms_torch"], b["ms_op"] = sorted(p["torch_ms"])[len(p["torch_ms"]) // 2], sorted(p["op_ms"])[len(p["op_ms"]) // 2]
            b["tflops_torch"], b["tflops_op"] = flop / b["ms_torch"] / 1e9, flop / b["ms_op"] / 1e9
            for r in rows:
                if r["shape"] == shape and r["tokens"] == p["T"] and r["routing"] == p["routing"]:
                    r.update(ms_torch=b["ms_torch"], tflops_torch=b["tflops_torch"], ms_op=b["ms_op"], tflops_op=b["tflops_op"])
        pts.clear()  # this shape's inputs and outputs go; its weights when the next shape rebinds them
        torch.cuda.empty_cache()

    choice = sel.choose(rows)
    hdr = sel.header(choice, "the tuning run of bench_fp8_grouped.py on " + torch.cuda.get_device_name(0))
    env = env_info("cuda", device_name=torch.cuda.get_device_name(0))  # bench/report.py: one record of where a run ran
    meta = dict(date=env["date"][:10], commit=env["git_commit"], device=env["device_name"], torch=env["torch"],
                command=env["argv"], seconds=time.time() - t0, variants_built=built, knobs=KNOBS)
    outd = Path(args.out)
    outd.mkdir(parents=True, exist_ok=True)
    ch = {f"{n}x{k}": {kk: (list(vv) if vv else None) for kk, vv in e.items()} for (n, k), e in choice["shapes"].items()}
    # "tflops" of a row would read as a BF16 grouped GEMM calibration point to perf.calibration (it walks every JSON
    # under docs/bench_results for tokens + tflops): the variants' numbers are stored as tflops_variant
    rows_out = [{("tflops_variant" if k == "tflops" else k): v for k, v in r.items()} for r in rows]
    write_atomic(outd / "fp8_grouped.json", json.dumps(dict(meta=meta, base=base_rows, rows=rows_out, choice=dict(
        shapes=ch, other=list(choice["other"]), split_allowed=choice["split_allowed"], scores=choice["scores"])), indent=1))
    if args.write_dispatch:
        write_atomic(Path(args.write_dispatch), hdr)
    md = tables(meta, base_rows, rows, variants, choice)
    write_atomic(outd / "fp8_grouped.md", md)
    print(md)
    if bad:
        print("bench_fp8_grouped: FAILED checks:", bad)
    return 1 if bad or missing else 0


def tables(meta, base_rows, rows, variants, choice) -> str:
    lines = [f"# FP8 grouped GEMM variants, {meta['device']}, torch {meta['torch']}, {meta['date']}", "",
             f"`{meta['command']}`", "",
             "TFLOP/s (median over interleaved rounds of the median of CUDA-event-timed calls); default scheduler knobs (raster along M, swizzle 1); "
             "torch = _scaled_grouped_mm rowwise on one buffer; op = this build's production dispatch. "
             "x = bit-exact multi_buffer == contiguous failed; ! = error >= 1e-2.", ""]
    cols = ["shape", "tokens", "routing", "torch", "op", *variants, "best / c1x2", "best / torch"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for b in base_rows:
        mine = {r["variant"]: r for r in rows if r["shape"] == b["shape"] and r["tokens"] == b["tokens"]
                and r["routing"] == b["routing"] and r["raster"] == 0 and r["swizzle"] == 0}
        cells = []
        for v in variants:
            r = mine.get(v)
            cells.append("-" if r is None else f"{r['tflops']:.0f}" + ("" if r["bit_exact_contiguous"] else " x")
                         + ("" if r["rel_err"] < 1e-2 else " !"))
        ok = [r for r in mine.values() if r["ok"]]
        best = max((r["tflops"] for r in ok), default=float("nan"))
        inc = mine.get(sel.FALLBACK)
        lines.append(f"| {b['shape']} | {b['tokens']} | {b['routing']} | {b['tflops_torch']:.0f} | {b['tflops_op']:.0f} | "
                     + " | ".join(cells) + f" | {best / inc['tflops'] if inc else float('nan'):.3f} | "
                     f"{best / b['tflops_torch']:.3f} |")
    knob_rows = [r for r in rows if r["raster"] or r["swizzle"]]
    if knob_rows:
        lines += ["", "Scheduler knobs (pass 2), TFLOP/s and ratio to the same variant with default knobs:", "",
                  "| shape | tokens | routing | variant | raster | swizzle | TFLOP/s | / default |", "|---|---|---|---|---|---|---|---|"]
        for r in knob_rows:
            d = next(x for x in rows if x["shape"] == r["shape"] and x["tokens"] == r["tokens"] and x["routing"] == r["routing"]
                     and x["variant"] == r["variant"] and x["raster"] == 0 and x["swizzle"] == 0)
            lines.append(f"| {r['shape']} | {r['tokens']} | {r['routing']} | {r['variant']} | {r['raster']} | {r['swizzle']} | "
                         f"{r['tflops']:.0f} | {r['tflops'] / d['tflops']:.3f} |")
    lines += ["", f"Bit-identical to {sel.FALLBACK} at every point: "
              + ", ".join(f"{v} {'yes' if all(r['same_as_fallback'] for r in rows if r['variant'] == v) else 'NO'}" for v in variants),
              "", "Choice (variant, raster, swizzle): " + "; ".join(
                  f"N={n} K={k}: {e['all']}" + (f", few rows {e['few']}" if e["few"] else "") for (n, k), e in choice["shapes"].items())
              + f"; other shapes: {choice['other']}", "", "Geometric means per shape: " + json.dumps(choice["scores"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
