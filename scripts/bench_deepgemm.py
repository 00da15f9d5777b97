#!/usr/bin/env python3
"""DeepGEMM's Hopper FP8 block-scale grouped GEMM against ours on DeepSeek-R1 expert shapes, in one process, on the
same inputs (docs/history/benchmarks-2026-12.md section 13).

  ours mb    torch.ops.dwdp.grouped_gemm, the production dispatch, weights in place over two buffers
             [LOCAL local | E - LOCAL slot] (the engine's multi_buffer unit)
  ours 1buf  the same op on ONE contiguous [E, N, K] buffer (the composite-view layout)
  dg idx     deep_gemm.m_grouped_fp8_gemm_nt_contiguous on the same [E, N, K] buffer and scales, rows padded per
             expert to 128 (dwdp_trtllm/ops/deepgemm.py), m_indices layout (-1 on padding rows)
  dg psum    the same kernel with the psum layout (padded end row per expert)
  prep       DeepGEMM's layout work from our op's inputs (expert-sorted unpadded rows + offs): the padded layout
             from offs, rows and scales copied to their padded rows, the scales transposed into its MN-major
             TMA-aligned layout; `transform` is that transpose alone; `unpad` gathers the [R, N] result back
Shapes: fc1 N=4096 K=7168, fc2 N=7168 K=2048; E = 256, top-8; T = 4K/16K/64K tokens (R = 8 T rows); uniform or
skewed routing (scripts/bench_grouped_gemm.counts_for); random e4m3 codes of N(0,1)*64 (never zeros), scales
U(1e-3, 1.1e-2) for activations and U(1e-4, 1.1e-3) for weights (bench_fp8_grouped.py's inputs).
TFLOP/s count USEFUL flops only, 2 R N K: DeepGEMM's padding rows are its cost, not its work.
Timing: CUDA events around each call, median of n calls (about --target-ms timed) after one warm-up, in --rounds
interleaved rounds (every candidate once per round); a number is the median of its round medians; the round
medians' min-max is kept as the spread.
Checks at every point: ours mb == ours 1buf bit for bit; every output row written (DeepGEMM's padded output poisoned
with NaN first); ||out - ref|| / ||ref|| < --tol on three experts (a local one, the first slot one, the last)
against float32 products of the dequantised operands, for ours and both DeepGEMM layouts; ||dg - ours|| / ||ours||
over the whole output (< --tol; not required bit-exact, as two FP8 block-scale kernels may accumulate in different
orders: on the H200 they were bit-identical, docs/history/benchmarks-2026-12.md section 13).
Writes <out>/deepgemm.json and deepgemm.md; exit 1 if a check fails.
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
from bench_fp8_grouped import E, SHAPES, make_point, time_ms  # noqa: E402
from bench_grouped_gemm import counts_for  # noqa: E402
from dwdp_trtllm import env as dwdp_env  # noqa: E402
from dwdp_trtllm.bench.report import env_info, write_atomic  # noqa: E402
from dwdp_trtllm.ops import deepgemm as dgl  # noqa: E402
from dwdp_trtllm.ops.build import load  # noqa: E402
from dwdp_trtllm.ops.reference import dequantize_fp8_blockwise  # noqa: E402

CANDS = ["ours_mb", "ours_1buf", "dg_idx", "dg_psum"]
AUX = ["prep", "transform", "unpad"]


def rel(x, y) -> float:
    """||x - y|| / ||y|| in float32, in row chunks (outputs reach 4 GiB)."""
    num = den = 0.0
    for i in range(0, x.shape[0], 65536):
        xa, ya = x[i:i + 65536].float(), y[i:i + 65536].float()
        num += float(((xa - ya) ** 2).sum())
        den += float((ya ** 2).sum())
    return (num / den) ** 0.5 if den > 0 else float("inf")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench_out/deepgemm")
    ap.add_argument("--tokens", default="4096,16384,65536")
    ap.add_argument("--routings", default="uniform,skewed")
    ap.add_argument("--shapes", default="fc1,fc2")
    ap.add_argument("--local", type=int, default=32, help="experts in the local buffer (the rest in the slot)")
    ap.add_argument("--target-ms", type=float, default=25, help="time timed per candidate per round")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per point")
    ap.add_argument("--tol", type=float, default=1e-2, help="relative error bound of every check")
    ap.add_argument("--prewarm", default="", metavar="SHAPE:LAYOUT",
                    help="only JIT-compile DeepGEMM's kernels for this shape and layout (idx or psum) at every point's "
                         "padded row count, on unset data, then exit (gpu_check.sh runs one per pair in parallel)")
    args = ap.parse_args()
    if args.prewarm:
        return prewarm(args)

    load(cuda=True)
    op = torch.ops.dwdp.grouped_gemm
    dg = dgl.module()  # DeepGEMMUnavailable (one line naming the build script) if not built
    align = int(dg.get_mk_alignment_for_contiguous_layout())
    if align != dgl.ALIGN_M:
        raise SystemExit(f"bench_deepgemm: DeepGEMM's M alignment is {align}, dwdp_trtllm/ops/deepgemm.py assumes {dgl.ALIGN_M}")
    print(f"deep_gemm {getattr(dg, '__version__', '?')} from {Path(dg.__file__).parent}; M alignment {align}; "
          f"SMs {dg.get_num_sms()}", flush=True)
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)
    cpu_gen = torch.Generator().manual_seed(0)
    L, t0, bad, rows = args.local, time.time(), [], []
    f8 = torch.float8_e4m3fn
    for shape in args.shapes.split(","):
        N, K = SHAPES[shape]
        w = torch.empty(E, N, K, device=dev, dtype=f8)
        for i in range(0, E, 16):  # codes of N(0, 1) * 64: the e4m3 range, no zeros (as bench_fp8_grouped.py)
            w[i:i + 16] = (torch.randn(min(16, E - i), N, K, device=dev, generator=g) * 64).to(f8)
        ws = torch.rand(E, N // 128, K // 128, device=dev, generator=g) * 1e-3 + 1e-4
        w_local, w_slot = w[:L].clone(), w[L:].clone()
        s_local, s_slot = ws[:L].clone(), ws[L:].clone()
        bidx = torch.tensor([0] * L + [1] * (E - L), dtype=torch.int32, device=dev)
        rrow = torch.tensor(list(range(L)) + list(range(E - L)), dtype=torch.int32, device=dev)
        bidx1, rrow1 = torch.zeros(E, dtype=torch.int32, device=dev), torch.arange(E, dtype=torch.int32, device=dev)
        bufs = (w, ws, w_local, w_slot, s_local, s_slot, bidx, rrow, bidx1, rrow1)
        for T in (int(t) for t in args.tokens.split(",")):
            for routing in args.routings.split(","):
                rows.append(run_point(args, dg, op, shape, T, routing, bufs, g, cpu_gen, bad))
                torch.cuda.empty_cache()
        del w, ws, w_local, w_slot, s_local, s_slot, bufs
        torch.cuda.empty_cache()

    env = env_info("cuda", device_name=torch.cuda.get_device_name(0))
    meta = dict(date=env["date"][:10], commit=env["git_commit"], device=env["device_name"], torch=env["torch"],
                command=env["argv"], seconds=time.time() - t0, deep_gemm=getattr(dg, "__version__", "?"),
                deep_gemm_source=dwdp_env.deepgemm_source(),
                rounds=args.rounds, target_ms=args.target_ms, tol=args.tol)
    outd = Path(args.out)
    outd.mkdir(parents=True, exist_ok=True)
    # no key named "tflops" at the top level of a row: perf.calibration walks JSON under docs/ for tokens + tflops
    write_atomic(outd / "deepgemm.json", json.dumps(dict(meta=meta, rows=[{("tflops_by" if k == "tflops" else k): v
                                                                          for k, v in r.items()} for r in rows]), indent=1))
    md = table(meta, rows)
    write_atomic(outd / "deepgemm.md", md)
    print(md)
    if bad:
        print("bench_deepgemm: FAILED checks:", *bad, sep="\n  ")
    return 1 if bad else 0


def run_point(args, dg, op, shape, T, routing, bufs, g, cpu_gen, bad) -> dict:
    """One point: inputs, the checks, the interleaved timing rounds; its tensors go when it returns."""
    N, K = SHAPES[shape]
    L = args.local
    w, ws, w_local, w_slot, s_local, s_slot, bidx, rrow, bidx1, rrow1 = bufs
    dev = w.device
    p = make_point(N, K, T, routing, dev, g, cpu_gen)
    a, sa, offs, R = p["a"], p["sa"], p["offs"], p["R"]
    flop = 2.0 * R * N * K
    lay = dgl.padded_layout(offs)
    M = lay.rows_padded
    a_pad = dgl.pad_rows(a, lay)
    sa_pad = dgl.pad_rows(sa, lay)
    sa_t = dg.get_mn_major_tma_aligned_tensor(sa_pad)
    d_idx = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
    d_psum = torch.empty(M, N, dtype=torch.bfloat16, device=dev)
    a_pad2, sa_pad2 = torch.zeros_like(a_pad), torch.zeros_like(sa_pad)  # prep's targets (stale = fine)

    def prep():
        l2 = dgl.padded_layout(offs, rows=R, rows_padded=M)  # from offs on the GPU, no host sync
        dgl.pad_rows(a, l2, a_pad2)
        dgl.pad_rows(sa, l2, sa_pad2)
        return dg.get_mn_major_tma_aligned_tensor(sa_pad2)

    runs = {
        "ours_mb": lambda: op(a, offs, [w_local, w_slot], bidx, rrow, sa, [s_local, s_slot]),
        "ours_1buf": lambda: op(a, offs, [w], bidx1, rrow1, sa, [ws]),
        "dg_idx": lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a_pad, sa_t), (w, ws), d_idx, lay.m_indices_M),
        "dg_psum": lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a_pad, sa_t), (w, ws), d_psum, lay.psum_E,
                                                               use_psum_layout=True),
        "prep": prep,
        "transform": lambda: dg.get_mn_major_tma_aligned_tensor(sa_pad),
        "unpad": lambda: dgl.unpad_rows(d_psum, lay),
    }
    # correctness (first calls: DeepGEMM's JIT compiles here, outside the timing)
    tc = time.time()
    d_idx.fill_(float("nan"))
    d_psum.fill_(float("nan"))
    out_mb, out_1 = runs["ours_mb"](), runs["ours_1buf"]()
    runs["dg_idx"]()
    runs["dg_psum"]()
    torch.cuda.synchronize()
    jit_s = time.time() - tc
    y_idx, y_psum = dgl.unpad_rows(d_idx, lay), dgl.unpad_rows(d_psum, lay)
    sa_t2 = prep()
    prep_ok = bool(torch.equal(a_pad2.view(torch.uint8), a_pad.view(torch.uint8)) and torch.equal(sa_t2, sa_t))
    ends, errs = p["offs"].tolist(), {c: [] for c in CANDS}
    for e in (0, L, E - 1):
        lo, hi = (ends[e - 1] if e else 0), ends[e]
        if hi > lo:
            ref = dequantize_fp8_blockwise(a[lo:hi], sa[lo:hi], (1, 128)) @ dequantize_fp8_blockwise(w[e], ws[e]).t()
            for c, y in zip(CANDS, (out_mb, out_1, y_idx, y_psum)):
                errs[c].append(float((y[lo:hi].float() - ref).norm() / ref.norm()))
    r = dict(shape=shape, N=N, K=K, tokens=T, routing=routing, rows=R, rows_padded=M, pad_frac=M / R - 1,
             E=E, local=L, max_expert_rows=int(p["counts"].max()), min_expert_rows=int(p["counts"].min()),
             first_call_s=jit_s,
             mb_equals_1buf=bool(torch.equal(out_mb, out_1)),
             all_rows_written=bool(not torch.isnan(y_idx).any() and not torch.isnan(y_psum).any()),
             prep_equals_setup=prep_ok,
             rel_err={c: max(v, default=float('nan')) for c, v in errs.items()},
             dg_idx_vs_ours=rel(y_idx, out_mb), dg_psum_vs_ours=rel(y_psum, out_mb),
             dg_idx_equals_psum=bool(torch.equal(y_idx, y_psum)))
    # timing: interleaved rounds
    per = {c: [] for c in runs}
    for _ in range(args.rounds):
        for c, fn in runs.items():
            per[c].append(time_ms(fn, args.target_ms))
    med = {c: sorted(v)[len(v) // 2] for c, v in per.items()}
    r.update(ms=med, ms_rounds=per, tflops={c: flop / med[c] / 1e9 for c in CANDS})
    best_dg = min(med["dg_idx"], med["dg_psum"])
    r["tflops_dg_whole"] = flop / (best_dg + med["prep"] + med["unpad"]) / 1e9
    r["dg_best_over_ours_mb"] = med["ours_mb"] / best_dg
    ok = (r["mb_equals_1buf"] and r["all_rows_written"] and r["prep_equals_setup"]
          and max(r["rel_err"].values()) < args.tol and r["dg_idx_vs_ours"] < args.tol
          and r["dg_psum_vs_ours"] < args.tol)
    r["ok"] = ok
    if not ok:
        bad.append(f"{shape} T={T} {routing}: " + json.dumps({k: r[k] for k in (
            "mb_equals_1buf", "all_rows_written", "prep_equals_setup", "rel_err", "dg_idx_vs_ours", "dg_psum_vs_ours")}))
    tf = r["tflops"]
    print(f"{shape} T={T:6d} {routing:7s} R={R} M={M} (+{100 * r['pad_frac']:.1f}%)  TFLOP/s: ours mb {tf['ours_mb']:.0f} "
          f"1buf {tf['ours_1buf']:.0f} | dg idx {tf['dg_idx']:.0f} psum {tf['dg_psum']:.0f} | dg/ours "
          f"{r['dg_best_over_ours_mb']:.2f}x | prep {med['prep']:.3f} transform {med['transform']:.3f} "
          f"unpad {med['unpad']:.3f} ms, whole dg {r['tflops_dg_whole']:.0f} | err ours {r['rel_err']['ours_mb']:.1e} "
          f"dg {r['rel_err']['dg_psum']:.1e} dg-vs-ours {r['dg_psum_vs_ours']:.1e} | ok={ok} first call {jit_s:.1f}s",
          flush=True)
    return r


def point_counts(args):
    """Every point's per-expert row counts, drawn exactly as main() draws them (same generator, same order)."""
    cpu_gen, out = torch.Generator().manual_seed(0), {}
    for shape in args.shapes.split(","):
        for T in (int(t) for t in args.tokens.split(",")):
            for routing in args.routings.split(","):
                out[(shape, T, routing)] = counts_for(T, routing, cpu_gen)
    return out


def prewarm(args) -> int:
    """DeepGEMM compiles a kernel per configuration at its first call (nvcc, seconds each) and picks the configuration
    from M, N, K: calling it once per point's padded M on unset data compiles exactly what main() will call."""
    shape, layout = args.prewarm.split(":")
    N, K = SHAPES[shape]
    dg, dev, t0 = dgl.module(), torch.device("cuda", 0), time.time()
    w = torch.empty(E, N, K, device=dev, dtype=torch.float8_e4m3fn)
    ws = torch.ones(E, N // 128, K // 128, device=dev)
    for (s, T, routing), c in point_counts(args).items():
        if s != shape:
            continue
        lay = dgl.padded_layout(c.cumsum(0).to(torch.int32).to(dev))
        a = torch.empty(lay.rows_padded, K, device=dev, dtype=torch.float8_e4m3fn)
        sa_t = dg.get_mn_major_tma_aligned_tensor(torch.ones(lay.rows_padded, K // 128, device=dev))
        d = torch.empty(lay.rows_padded, N, device=dev, dtype=torch.bfloat16)
        if layout == "psum":
            dg.m_grouped_fp8_gemm_nt_contiguous((a, sa_t), (w, ws), d, lay.psum_E, use_psum_layout=True)
        else:
            dg.m_grouped_fp8_gemm_nt_contiguous((a, sa_t), (w, ws), d, lay.m_indices_M)
        torch.cuda.synchronize()
        del a, sa_t, d
    print(f"prewarm {args.prewarm}: {time.time() - t0:.1f} s", flush=True)
    return 0


def table(meta, rows) -> str:
    lines = [f"# DeepGEMM vs ours, FP8 block-scale grouped GEMM, {meta['device']}, torch {meta['torch']}, {meta['date']}", "",
             f"`{meta['command']}`", "",
             f"TFLOP/s on useful flops (2 R N K), median over {meta['rounds']} interleaved rounds of CUDA-event medians; "
             "ours mb = production dispatch on [32 local | 224 slot]; ours 1buf = same op on one [E, N, K] buffer; "
             "dg idx / dg psum = deep_gemm.m_grouped_fp8_gemm_nt_contiguous on the same buffer, rows padded per expert to 128; "
             "prep / unpad ms = DeepGEMM's layout work from our op's inputs / back; whole = best dg with prep + unpad; "
             "err = max rel. error vs float32 dequantised reference (3 experts); dg-ours = ||dg - ours|| / ||ours||.", "",
             "| shape | tokens | routing | pad rows | ours mb | ours 1buf | dg idx | dg psum | best dg / ours mb | prep ms | transform ms | unpad ms | dg whole | err ours | err dg | dg-ours | ok |",
             "|" + "---|" * 17]
    for r in rows:
        tf, ms = r["tflops"], r["ms"]
        lines.append(f"| {r['shape']} N={r['N']} K={r['K']} | {r['tokens']} | {r['routing']} | {100 * r['pad_frac']:.1f}% | "
                     f"{tf['ours_mb']:.0f} | {tf['ours_1buf']:.0f} | {tf['dg_idx']:.0f} | {tf['dg_psum']:.0f} | "
                     f"{r['dg_best_over_ours_mb']:.2f} | {ms['prep']:.3f} | {ms['transform']:.3f} | {ms['unpad']:.3f} | "
                     f"{r['tflops_dg_whole']:.0f} | {r['rel_err']['ours_mb']:.1e} | "
                     f"{max(r['rel_err']['dg_idx'], r['rel_err']['dg_psum']):.1e} | "
                     f"{max(r['dg_idx_vs_ours'], r['dg_psum_vs_ours']):.1e} | {'yes' if r['ok'] else 'NO'} |")
    spread = [f"{r['shape']} {r['tokens']} {r['routing']} {c}: {min(r['ms_rounds'][c]):.3f}-{max(r['ms_rounds'][c]):.3f}"
              for r in rows for c in CANDS]
    lines += ["", "Round medians, min-max ms: " + "; ".join(spread)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
