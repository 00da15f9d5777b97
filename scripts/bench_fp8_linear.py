#!/usr/bin/env python3
"""FP8 block-scale linear layers on DeepSeek-R1 shapes: which kernel the engine uses, measured in one run.

Per shape (the linear layers an FP8 release quantises: q_a, q_b, kv_a, kv_b, o, dense gate|up and down, shared
gate|up and down) and token count T, side by side on the same data:
  bf16       F.linear on the dequantised weight (what the engine ran before)
  scaled_mm  torch._scaled_mm, block scales (1x128 activations, 128x128 weights, outer-dim-major scales): GEMM alone
  plugin     torch.ops.dwdp.grouped_gemm (CUTLASS sm90 FP8 blockwise, the MoE op) with one group: GEMM alone
  linear     engine/fp8_linear.linear: 1x128 quantisation of x + scaled_mm (what the engine runs now)
Every FP8 output is checked against fp8_linear_reference (dequantised operands, float32): ||out - ref|| / ||ref||.
Timing: triton.testing.do_bench, median; random data (never zeros). Writes <out>/fp8_linear.json and .md.
Legend: T tokens, K in, N out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dwdp_trtllm.engine import fp8_linear as fl  # noqa: E402
from dwdp_trtllm.bench.report import env_info  # noqa: E402

#: name -> (N, K) at DeepSeek-R1 width (gate|up as one weight, as the engine runs them)
SHAPES = {"q_a": (1536, 7168), "q_b": (24576, 1536), "kv_a": (576, 7168), "kv_b": (32768, 512), "o": (7168, 16384),
          "dense_gate_up": (36864, 7168), "dense_down": (7168, 18432), "shared_gate_up": (4096, 7168),
          "shared_down": (7168, 2048)}
#: per DeepSeek-R1 MoE layer (q_a .. o, shared) and per dense layer (q_a .. o, dense): how the set is summed
MOE_SET = ("q_a", "q_b", "kv_a", "kv_b", "o", "shared_gate_up", "shared_down")
DENSE_SET = ("q_a", "q_b", "kv_a", "kv_b", "o", "dense_gate_up", "dense_down")


def rel(x, y):
    return float((x.float() - y.float()).norm() / y.float().norm())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--tokens", default="4096,16384")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--no-plugin", action="store_true", help="skip the dwdp::grouped_gemm column (no CUTLASS build)")
    ap.add_argument("--warmup-ms", type=float, default=10)
    ap.add_argument("--rep-ms", type=float, default=50)
    args = ap.parse_args()
    from triton.testing import do_bench

    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev).manual_seed(0)
    bench = lambda f: do_bench(f, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")  # noqa: E731
    plugin = None
    if not args.no_plugin:
        try:
            from dwdp_trtllm.ops.build import load
            load(cuda=True)
            plugin = torch.ops.dwdp.grouped_gemm
        except Exception as e:  # noqa: BLE001 -- the column is reported missing, with why
            print(f"plugin column skipped: {type(e).__name__}: {e}", flush=True)
    rows, t0 = [], time.time()
    for name in args.shapes.split(","):
        N, K = SHAPES[name]
        w = torch.randn(N, K, device=dev, generator=gen) / K ** 0.5
        f = fl.Fp8Linear.quantize(w)
        w_bf = f.dequantized(torch.bfloat16)
        del w
        for T in [int(t) for t in args.tokens.split(",")]:
            x = torch.randn(T, K, device=dev, generator=gen, dtype=torch.float32).to(torch.bfloat16)
            flop = 2.0 * T * N * K
            tf = lambda ms: flop / ms / 1e9  # noqa: E731
            ref = fl.fp8_linear_reference(x, f)
            a = fl.quantize(x)
            r = dict(shape=name, N=N, K=K, tokens=T)
            r["ms_bf16"] = bench(lambda: F.linear(x, w_bf))
            r["rel_bf16"] = rel(F.linear(x, w_bf), ref)  # the activation quantisation the bf16 path does not do
            try:
                y = fl._mm(a, f, None)[:T, :N]
                r["rel_scaled_mm"] = rel(y, ref)
                r["ms_scaled_mm"] = bench(lambda: fl._mm(a, f, None))
                r["rel_linear"] = rel(fl.linear(x, f), ref)
                r["ms_linear"] = bench(lambda: fl.linear(x, f))
            except RuntimeError as e:
                r["scaled_mm_error"] = str(e).splitlines()[0][:200]
            if plugin is not None and N % 128 == 0:
                try:
                    q_row, s_row = a.q[:T], a.scale[:T].contiguous()  # the op takes row-major [T, K/128] scales
                    offs = torch.tensor([T], dtype=torch.int32, device=dev)
                    zero = torch.zeros(1, dtype=torch.int32, device=dev)
                    wq, ws = f.w_NK[None], f.scale_NbKb[None]
                    r["rel_plugin"] = rel(plugin(q_row, offs, [wq], zero, zero, s_row, [ws]), ref)
                    r["ms_plugin"] = bench(lambda: plugin(q_row, offs, [wq], zero, zero, s_row, [ws]))
                except RuntimeError as e:
                    r["plugin_error"] = str(e).splitlines()[0][:200]
            for k in ("bf16", "scaled_mm", "linear", "plugin"):
                if f"ms_{k}" in r:
                    r[f"tflops_{k}"] = tf(r[f"ms_{k}"])
            rows.append(r)
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
            del x, ref, a
        del f, w_bf
        torch.cuda.empty_cache()
    env = env_info("cuda", device_name=torch.cuda.get_device_name(0))  # bench/report.py: one record of where a run ran
    date, commit = env["date"][:10], env["git_commit"]
    meta = dict(date=date, commit=commit, device=env["device_name"], torch=env["torch"], command=env["argv"],
                seconds=time.time() - t0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fp8_linear.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    fmt = lambda r, k: f"{r[f'ms_{k}']:.3f} ({r[f'tflops_{k}']:.0f})" if f"ms_{k}" in r else "-"  # noqa: E731
    lines = [f"# FP8 block-scale linears, {meta['device']}, torch {meta['torch']}, commit {commit}, {date}", "",
             f"`{meta['command']}`", "", "ms (TFLOP/s), median of do_bench; rel = ||out - ref|| / ||ref|| against "
             "fp8_linear_reference", "",
             "| shape | N | K | T | bf16 | scaled_mm | plugin (1 group) | linear (quant + scaled_mm) | bf16/linear | "
             "rel scaled_mm | rel plugin | rel bf16 |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['ms_bf16'] / r['ms_linear']:.2f}" if "ms_linear" in r else "-"
        lines.append(f"| {r['shape']} | {r['N']} | {r['K']} | {r['tokens']} | {fmt(r, 'bf16')} | {fmt(r, 'scaled_mm')} | "
                     f"{fmt(r, 'plugin')} | {fmt(r, 'linear')} | {ratio} | {r.get('rel_scaled_mm', float('nan')):.1e} | "
                     f"{r.get('rel_plugin', float('nan')):.1e} | {r['rel_bf16']:.1e} |")
    for T in sorted({r["tokens"] for r in rows}):
        for set_name, names in (("MoE layer set", MOE_SET), ("dense layer set", DENSE_SET)):
            sel = [r for r in rows if r["tokens"] == T and r["shape"] in names]
            if len(sel) == len(names) and all("ms_linear" in r for r in sel):
                b, lin = sum(r["ms_bf16"] for r in sel), sum(r["ms_linear"] for r in sel)
                lines.append(f"\n{set_name}, T={T}: bf16 {b:.2f} ms, FP8 linear {lin:.2f} ms ({b / lin:.2f}x)")
    (out / "fp8_linear.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    bad = [r["shape"] for r in rows if r.get("rel_scaled_mm", 0) > 1e-2 or r.get("rel_plugin", 0) > 1e-2
           or r.get("rel_linear", 0) > 1e-2 or "scaled_mm_error" in r]
    if bad:
        print(f"bench_fp8_linear: FAILED (error > 1e-2 or kernel refused): {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
