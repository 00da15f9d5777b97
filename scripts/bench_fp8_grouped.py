#!/usr/bin/env python3
"""The FP8 grouped GEMM on DeepSeek-R1 expert shapes (issue 25): our multi_buffer op against torch's
`_scaled_grouped_mm`, side by side in one run.

  op        torch.ops.dwdp.grouped_gemm, CUTLASS sm90 FP8 blockwise (1x128 activation / 128x128 weight scales),
            weights read in place from two buffers, [LOCAL local | E - LOCAL slot] (the engine's DWDP split)
  torch     torch._scaled_grouped_mm with rowwise scales on one contiguous [E, N, K] buffer (the floor's kernel;
            torch 2.11 has no blockwise grouped recipe on sm_90)
Shapes: fc1 N=4096 K=7168 (gate|up), fc2 N=7168 K=2048 (down); E = 256 experts, top-8; T = 4K / 16K / 64K tokens
(R = 8 T rows); routing uniform or skewed (log-normal expert popularity, scripts/bench_grouped_gemm.counts_for).
The op's rows of three experts are checked against float32 products of the dequantised operands.
Timing: triton.testing.do_bench median; random codes (never zeros). Writes <out>/fp8_grouped.json and .md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grouped_gemm import counts_for  # noqa: E402
from dwdp_trtllm.ops.build import load  # noqa: E402
from dwdp_trtllm.ops.reference import dequantize_fp8_blockwise  # noqa: E402
from dwdp_trtllm.bench.report import env_info  # noqa: E402

SHAPES = {"fc1": (4096, 7168), "fc2": (7168, 2048)}  # name -> (N, K)
E, TOPK = 256, 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--tokens", default="4096,16384,65536")
    ap.add_argument("--routings", default="uniform,skewed")
    ap.add_argument("--local", type=int, default=32, help="experts in the local buffer (the rest in the slot)")
    ap.add_argument("--warmup-ms", type=float, default=10)
    ap.add_argument("--rep-ms", type=float, default=50)
    args = ap.parse_args()
    from triton.testing import do_bench

    load(cuda=True)
    op = torch.ops.dwdp.grouped_gemm
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)
    cpu_gen = torch.Generator().manual_seed(0)
    bench = lambda f: do_bench(f, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")  # noqa: E731
    f8 = torch.float8_e4m3fn
    L = args.local
    rows, t0, bad = [], time.time(), []
    for shape, (N, K) in SHAPES.items():
        w = torch.empty(E, N, K, device=dev, dtype=f8)
        for i in range(0, E, 16):  # codes of N(0, 1) * 64: the e4m3 range, no zeros
            w[i:i + 16] = (torch.randn(min(16, E - i), N, K, device=dev, generator=g) * 64).to(f8)
        ws = torch.rand(E, N // 128, K // 128, device=dev, generator=g) * 1e-3 + 1e-4
        w_local, w_slot = w[:L].clone(), w[L:].clone()  # two allocations, as the engine's local buffer and slot
        s_local, s_slot = ws[:L].clone(), ws[L:].clone()
        bidx = torch.tensor([0] * L + [1] * (E - L), dtype=torch.int32, device=dev)
        rrow = torch.tensor(list(range(L)) + list(range(E - L)), dtype=torch.int32, device=dev)
        w_KN = w.transpose(1, 2)
        sw_row = torch.rand(E, N, device=dev, generator=g) * 1e-3 + 1e-4
        for T in [int(t) for t in args.tokens.split(",")]:
            for routing in args.routings.split(","):
                c = counts_for(T, routing, cpu_gen)
                R = int(c.sum())
                offs = c.cumsum(0).to(torch.int32).to(dev)
                a = (torch.randn(R, K, device=dev, generator=g) * 64).to(f8)
                sa = torch.rand(R, K // 128, device=dev, generator=g) * 1e-2 + 1e-3
                sa_row = torch.rand(R, device=dev, generator=g) * 1e-2 + 1e-3
                flop = 2.0 * R * N * K
                out = op(a, offs, [w_local, w_slot], bidx, rrow, sa, [s_local, s_slot])
                err, start = 0.0, 0
                ends = offs.tolist()
                for e in (0, L, E - 1):  # a local expert, the first slot expert, the last
                    lo, hi = (ends[e - 1] if e else 0), ends[e]
                    if hi > lo:
                        ref = (dequantize_fp8_blockwise(a[lo:hi], sa[lo:hi], (1, 128))
                               @ dequantize_fp8_blockwise(w[e], ws[e]).t())
                        err = max(err, float((out[lo:hi].float() - ref).norm() / ref.norm()))
                ms_op = bench(lambda: op(a, offs, [w_local, w_slot], bidx, rrow, sa, [s_local, s_slot]))
                ms_t = bench(lambda: torch._scaled_grouped_mm(a, w_KN, sa_row, sw_row, offs=offs, out_dtype=torch.bfloat16))
                r = dict(shape=shape, N=N, K=K, tokens=T, rows=R, routing=routing, local=L, max_expert_rows=int(c.max()),
                         ms_op=ms_op, ms_torch=ms_t, tflops_op=flop / ms_op / 1e9, tflops_torch=flop / ms_t / 1e9,
                         op_over_torch=ms_t / ms_op, rel_err_op=err)
                rows.append(r)
                if not err < 1e-2:
                    bad.append(f"{shape} T={T} {routing}: rel error {err:.2e}")
                print(f"{shape} T={T:6d} {routing:7s} op {r['tflops_op']:6.0f} TFLOP/s  torch {r['tflops_torch']:6.0f}"
                      f"  op/torch {r['op_over_torch']:.3f}  err {err:.1e}", flush=True)
                del a, sa, sa_row, out
        del w, ws, w_local, w_slot, s_local, s_slot, w_KN
        torch.cuda.empty_cache()
    env = env_info("cuda", device_name=torch.cuda.get_device_name(0))  # bench/report.py: one record of where a run ran
    date, commit = env["date"][:10], env["git_commit"]
    meta = dict(date=date, commit=commit, device=env["device_name"], torch=env["torch"], command=env["argv"],
                seconds=time.time() - t0)
    outd = Path(args.out)
    outd.mkdir(parents=True, exist_ok=True)
    (outd / "fp8_grouped.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    lines = [f"# FP8 grouped GEMM, {meta['device']}, torch {meta['torch']}, commit {commit}, {date}", "",
             f"`{meta['command']}`", "", "TFLOP/s (do_bench median); op = multi_buffer over [local | slot], torch = "
             "_scaled_grouped_mm rowwise on one buffer", "",
             "| shape | tokens | routing | rows | op TFLOP/s | torch TFLOP/s | op/torch | op ms | rel err op |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['tokens']} | {r['routing']} | {r['rows']} | {r['tflops_op']:.0f} | "
                     f"{r['tflops_torch']:.0f} | {r['op_over_torch']:.3f} | {r['ms_op']:.3f} | {r['rel_err_op']:.1e} |")
    (outd / "fp8_grouped.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if bad:
        print("bench_fp8_grouped: FAILED:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
