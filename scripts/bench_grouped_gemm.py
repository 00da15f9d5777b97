#!/usr/bin/env python3
"""Multi-buffer grouped GEMM vs the alternatives on DeepSeek-V3 MoE shapes (one rank's layer, all 256 experts).

Methods, side by side, for local/fetched splits of G = 2, 4, 8 (experts [0, E/G) in the local buffer, the rest in
the prefetch slot):
  (a) op     torch.ops.dwdp.grouped_gemm reading both buffers in place (CUTLASS sm90a ptr-array)
  (b) view   CUDA VMM composite view of both buffers + torch._grouped_mm
  (c) merge  D2D gather into one [E, N, K] tensor + torch._grouped_mm (the copy is timed)
  (d) ceil   torch._grouped_mm on weights that are already contiguous (the ceiling)
  fp8(a)     the op with e4m3 weights/activations and DeepSeek block scales (1x128, 128x128)
Timing: triton.testing.do_bench, median. Writes <out>/grouped_gemm_<date>.json and .md.
Legend: T tokens per rank, R = T*topk rows, E experts, K in, N out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dwdp_trtllm.bench.checks import exit_code  # noqa: E402
from dwdp_trtllm.ops import merge_experts  # noqa: E402
from dwdp_trtllm.ops import grouped_gemm as _  # noqa: E402,F401  (loads the op)
from dwdp_trtllm.ops.build import load  # noqa: E402
from dwdp_trtllm.core.composite_view import CompositeView, VmmAllocation  # noqa: E402
from dwdp_trtllm.bench.report import env_info  # noqa: E402

SHAPES = {"fc1": (7168, 4096), "fc2": (2048, 7168)}  # name -> (K, N)
E, TOPK = 256, 8


def counts_for(T: int, routing: str, gen: torch.Generator) -> torch.Tensor:
    R = T * TOPK
    if routing == "uniform":
        c = torch.full((E,), R // E, dtype=torch.int64)
        c[: R - int(c.sum())] += 1
        return c
    p = torch.softmax(torch.randn(E, generator=gen), 0)  # log-normal expert popularity, sigma = 1
    c = (p * (R - E)).floor().long() + 1  # every expert gets >= 1 row
    c[torch.argsort(p, descending=True)[: R - int(c.sum())]] += 1
    return c


def rel(x, y):
    return ((x.float() - y.float()).norm() / y.float().norm()).item()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--tokens", default="2048,8192,16384,32768")
    ap.add_argument("--groups", default="2,4,8")
    ap.add_argument("--shapes", default="fc1,fc2")
    ap.add_argument("--routings", default="uniform,skewed")
    ap.add_argument("--warmup-ms", type=float, default=10)
    ap.add_argument("--rep-ms", type=float, default=40)
    ap.add_argument("--no-fp8", action="store_true")
    args = ap.parse_args()
    from triton.testing import do_bench

    load(cuda=True)
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    bench = lambda f: do_bench(f, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")  # noqa: E731
    rows, t0 = [], time.time()
    for shape in args.shapes.split(","):
        K, N = SHAPES[shape]
        per = N * K * 2
        w_ENK = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16) * 0.05
        merged = torch.empty_like(w_ENK)
        fp8 = None
        if not args.no_fp8:
            wq = torch.empty(E, N, K, device=dev, dtype=torch.float8_e4m3fn)
            for i in range(0, E, 32):
                wq[i:i + 32] = (torch.randn(min(32, E - i), N, K, device=dev) * 100).to(torch.float8_e4m3fn)
            ws = torch.rand(E, N // 128, K // 128, device=dev) * 1e-3 + 1e-4
            fp8 = (wq, ws)
        for T in [int(t) for t in args.tokens.split(",")]:
            for routing in args.routings.split(","):
                c = counts_for(T, routing, gen)
                R = int(c.sum())
                offs = c.cumsum(0).to(torch.int32).to(dev)
                a = torch.randn(R, K, device=dev, dtype=torch.bfloat16)
                flop = 2.0 * R * N * K
                tf = lambda ms: flop / ms / 1e9  # noqa: E731
                ceil_out = torch._grouped_mm(a, w_ENK.transpose(-2, -1), offs=offs)
                ms_d = bench(lambda: torch._grouped_mm(a, w_ENK.transpose(-2, -1), offs=offs))
                fp8_ms = None
                if fp8 is not None:
                    aq = (a.float() * 10).to(torch.float8_e4m3fn)
                    sa = torch.rand(R, K // 128, device=dev) * 1e-2 + 1e-3
                    half = E // 2
                    bidx8 = torch.tensor([0] * half + [1] * (E - half), dtype=torch.int32, device=dev)
                    rows8 = torch.cat([torch.arange(half), torch.arange(E - half)]).to(torch.int32).to(dev)
                    wl8, wf8 = [fp8[0][:half], fp8[0][half:]], [fp8[1][:half], fp8[1][half:]]
                    fp8_ms = bench(lambda: torch.ops.dwdp.grouped_gemm(aq, offs, wl8, bidx8, rows8, sa, wf8))
                    del aq, sa
                for G in [int(g) for g in args.groups.split(",")]:
                    L = E // G
                    local = VmmAllocation.create(L * per, 0)
                    slot = VmmAllocation.create((E - L) * per, 0)
                    wl = local.tensor((L, N, K), torch.bfloat16)
                    wf = slot.tensor((E - L, N, K), torch.bfloat16)
                    wl.copy_(w_ENK[:L])
                    wf.copy_(w_ENK[L:])
                    view = CompositeView([(local, 0, L * per), (slot, 0, (E - L) * per)])
                    w_view = view.tensor((E, N, K), torch.bfloat16)
                    bidx_l = [0] * L + [1] * (E - L)
                    rows_l = list(range(L)) + list(range(E - L))
                    bidx = torch.tensor(bidx_l, dtype=torch.int32, device=dev)
                    rws = torch.tensor(rows_l, dtype=torch.int32, device=dev)
                    out_a = torch.ops.dwdp.grouped_gemm(a, offs, [wl, wf], bidx, rws)
                    err_a = rel(out_a, ceil_out)
                    err_b = rel(torch._grouped_mm(a, w_view.transpose(-2, -1), offs=offs), ceil_out)
                    ms_a = bench(lambda: torch.ops.dwdp.grouped_gemm(a, offs, [wl, wf], bidx, rws))
                    ms_b = bench(lambda: torch._grouped_mm(a, w_view.transpose(-2, -1), offs=offs))

                    def merge_then_mm():
                        merge_experts([wl, wf], bidx_l, rows_l, out=merged)
                        return torch._grouped_mm(a, merged.transpose(-2, -1), offs=offs)

                    ms_c = bench(merge_then_mm)
                    torch.cuda.synchronize()
                    view.close()
                    local.close()
                    slot.close()
                    r = dict(shape=shape, K=K, N=N, tokens=T, rows=R, routing=routing, G=G,
                             tflops_a=tf(ms_a), tflops_b=tf(ms_b), tflops_c=tf(ms_c), tflops_d=tf(ms_d),
                             ms_a=ms_a, ms_b=ms_b, ms_c=ms_c, ms_d=ms_d, a_over_d=ms_d / ms_a, a_over_c=ms_c / ms_a,
                             b_over_d=ms_d / ms_b, relerr_a_vs_d=err_a, relerr_b_vs_d=err_b,
                             fp8_ms_a=fp8_ms, fp8_tflops_a=tf(fp8_ms) if fp8_ms else None,
                             fp8_over_bf16_a=(ms_a / fp8_ms) if fp8_ms else None)
                    rows.append(r)
                    print(f"{shape} T={T:6d} {routing:7s} G={G} a={r['tflops_a']:6.1f} b={r['tflops_b']:6.1f} "
                          f"c={r['tflops_c']:6.1f} d={r['tflops_d']:6.1f} TFLOP/s a/d={r['a_over_d']:.3f} "
                          f"a/c={r['a_over_c']:.3f} fp8a={r['fp8_tflops_a'] or 0:6.1f} err_a={err_a:.1e}", flush=True)
                del a, ceil_out
        del w_ENK, merged, fp8
        torch.cuda.empty_cache()
    env = env_info("cuda", device_name=torch.cuda.get_device_name(0))  # bench/report.py: one record of where a run ran
    date, commit = env["date"][:10], env["git_commit"]
    meta = dict(date=date, commit=commit, device=env["device_name"], torch=env["torch"], command=env["argv"],
                seconds=time.time() - t0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"grouped_gemm_{date}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    lines = [f"# grouped GEMM, {meta['device']}, torch {meta['torch']}, commit {commit}, {date}", "",
             f"`{meta['command']}`", "",
             "TFLOP/s (median). (a) multi-buffer op, (b) VMM view + _grouped_mm, (c) merge + _grouped_mm, "
             "(d) _grouped_mm contiguous; fp8 (a) uses 1x128/128x128 block scales.", "",
             "| shape | tokens | routing | G | (a) | (b) | (c) | (d) | a/d | a/c | fp8 (a) | fp8/bf16 (a) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f8 = f"{r['fp8_tflops_a']:.0f} | {r['fp8_over_bf16_a']:.2f}" if r["fp8_ms_a"] else "- | -"
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['routing']} | {r['G']} | {r['tflops_a']:.0f} | "
                     f"{r['tflops_b']:.0f} | {r['tflops_c']:.0f} | {r['tflops_d']:.0f} | {r['a_over_d']:.3f} | "
                     f"{r['a_over_c']:.3f} | {f8} |")
    (out / f"grouped_gemm_{date}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    # (a) and (b) against (d) on the same bf16 inputs: 1e-2 is the op's test tolerance (tests/gpu)
    return exit_code(rows, max_rel_err=1e-2, name="bench_grouped_gemm")


if __name__ == "__main__":
    sys.exit(main())
