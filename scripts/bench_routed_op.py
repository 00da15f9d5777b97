#!/usr/bin/env python3
"""The routed-expert op a DWDP rank runs, side by side with the GEMMs inside it, in one run on one GPU.

DeepSeek-R1 shapes (H 7168, I 2048, 256 experts, top-8), experts split as a DWDP-8 rank holds them ([--local local |
rest slot], two allocations), bf16 activations in and out, TensorRT-LLM's weight layout (w3_w1 up | gate), timed through
the TensorRT-LLM host's execution unit (integration/trtllm/moe_unit.routed_forward: sort, quantise + gather, fc1,
SwiGLU + quantise, fc2, combine). FP8 block scales (1x128 activations, 128x128 weights):
  op_cutlass   the op with dwdp::grouped_gemm's CUTLASS kernels (DWDP_MOE_MAINLOOP=cutlass: the default)
  op_dg        the op on DeepGEMM's mainloop, one call per buffer (DWDP_MOE_MAINLOOP=deepgemm: routed_mlp)
  op           the op under DWDP_MOE_MAINLOOP=auto (DeepGEMM from engine/gemm_paths.DEEPGEMM_MIN_ROWS_PER_EXPERT up)
  op_one       op_dg over ONE [E, ...] buffer (the composite view's / DEP's layout: no section read-back)
  gemm_ours    fc1 + fc2 alone: dwdp::grouped_gemm on the sorted rows, [local | slot]
  gemm_dg      fc1 + fc2 alone: DeepGEMM on the padded rows of one buffer
  gemm_torch   fc1 + fc2 alone: torch._scaled_grouped_mm (rowwise scales: another recipe, the floor's kernel)
BF16 experts (--bf16): op_bf16 (the op, dwdp::grouped_gemm BF16) against gemm_bf16 (torch._grouped_mm fc1 + fc2 on one
buffer, the rows the op's GEMMs see) and gemm_b_<variant> (fc1 + fc2 of each dwdp::grouped_gemm BF16 variant over the
split; the op runs the one grouped_gemm_bf16_choice names).
Rates are 6*T*K*H*I / time (the op's GEMM work). Timing: triton.testing.do_bench median per call; every variant once
per round, --rounds interleaved rounds on the same inputs, a time is the median of its rounds [min-max]. The op's
output is compared with op_cutlass's (the same arithmetic but the GEMM kernel: bit-equal expected).
Writes <out>/routed_op.json and routed_op.md; prints the table (80 columns).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_moe_op_vs_trtllm as mop  # noqa: E402  (its expert sources, routing and commit record)

FP8_VARIANTS = ("op_cutlass", "op_dg", "op", "op_one", "gemm_ours", "gemm_dg", "gemm_torch")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for routed_op.json / .md")
    ap.add_argument("--tokens", default="4096,8192,16384,32768", help="comma-separated tokens per call")
    ap.add_argument("--routings", default="uniform,power_law",
                    help="some of uniform (random top-k), balanced (the same rows per expert), power_law (alpha 1.01)")
    ap.add_argument("--variants", default=",".join(FP8_VARIANTS), help=f"of {', '.join(FP8_VARIANTS)}")
    ap.add_argument("--bf16", action="store_true", help="also the BF16 op against its two GEMMs (uniform routing)")
    ap.add_argument("--local", type=int, default=32, help="experts in the local buffer (the rest in the slot)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-ms", type=float, default=50)
    ap.add_argument("--rep-ms", type=float, default=300)
    a = ap.parse_args(argv)
    try:
        a.tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens: expected comma-separated integers, got {a.tokens!r}")
    a.routings, a.variants = a.routings.split(","), a.variants.split(",")
    for flag, vals, ok in (("--routings", a.routings, ("uniform", "balanced", "power_law")), ("--variants", a.variants, FP8_VARIANTS)):
        if any(v not in ok for v in vals):
            ap.error(f"{flag}: expected some of {', '.join(ok)}, got {','.join(vals)}")
    if a.rounds < 1 or any(t < 1 for t in a.tokens):
        ap.error("--rounds and --tokens must be >= 1")
    return a


def _mainloop(name: str):
    """Run fn with DWDP_MOE_MAINLOOP=name (read per call by engine/gemm_paths)."""
    def wrap(fn):
        def run():
            old = os.environ.get("DWDP_MOE_MAINLOOP")
            os.environ["DWDP_MOE_MAINLOOP"] = name
            try:
                return fn()
            finally:
                os.environ.pop("DWDP_MOE_MAINLOOP") if old is None else os.environ.__setitem__("DWDP_MOE_MAINLOOP", old)
        return run
    return wrap


def fp8_runs(spec, x_TH, ids_TK, w_TK, sources, variants) -> dict:
    """{variant: fn() -> output or None} for one point (the GEMM-only variants on their own prepared inputs)."""
    from dwdp_trtllm.engine import gemm_paths, moe_deepgemm
    from dwdp_trtllm.engine.fp8_rows import quantize_act_1x128
    from dwdp_trtllm.engine.moe_compute import sort_by_expert
    from dwdp_trtllm.integration.trtllm.moe_unit import W13, W13_SCALE, W2, W2_SCALE, routed_forward
    from dwdp_trtllm.ops import deepgemm as dgl
    E, H, I, dev = spec.num_experts, spec.hidden_size, spec.moe_intermediate, x_TH.device
    split, one = sources["multi_buffer"], sources["contiguous"]
    _, offs_E, _ = sort_by_expert(ids_TK.long(), E)
    A = ids_TK.numel()
    g = torch.Generator(device=dev).manual_seed(1)
    a1, a2 = (quantize_act_1x128(torch.randn(A, d, device=dev, generator=g).to(torch.bfloat16)) for d in (H, I))
    runs = {"op_cutlass": _mainloop("cutlass")(lambda: routed_forward(x_TH, ids_TK, w_TK, split, torch.bfloat16)),
            "op_dg": _mainloop("deepgemm")(lambda: routed_forward(x_TH, ids_TK, w_TK, split, torch.bfloat16)),
            "op": _mainloop("auto")(lambda: routed_forward(x_TH, ids_TK, w_TK, split, torch.bfloat16)),
            "op_one": _mainloop("deepgemm")(lambda: routed_forward(x_TH, ids_TK, w_TK, one, torch.bfloat16))}
    b, ib, rb = split.buffers, split.expert_buffer_idx_E, split.expert_row_E
    runs["gemm_ours"] = lambda: (gemm_paths._multi_buffer(a1, offs_E, b[W13], ib, rb, b[W13_SCALE]),
                                 gemm_paths._multi_buffer(a2, offs_E, b[W2], ib, rb, b[W2_SCALE]))
    if dgl.available():
        lay = dgl.padded_layout(offs_E, rows=A, rows_padded=dgl.padded_height(A, E))
        M, o = lay.rows_padded, one.buffers
        p1, p2 = (quantize_act_1x128(torch.randn(M, d, device=dev, generator=g).to(torch.bfloat16),
                                     scale_col_major=True) for d in (H, I))
        runs["gemm_dg"] = lambda: (
            dgl.grouped_gemm_fp8_padded(p1.q, p1.scale, o[W13][0], o[W13_SCALE][0], lay, use_psum=moe_deepgemm.USE_PSUM),
            dgl.grouped_gemm_fp8_padded(p2.q, p2.scale, o[W2][0], o[W2_SCALE][0], lay, use_psum=moe_deepgemm.USE_PSUM))
    if hasattr(torch, "_scaled_grouped_mm"):
        w13, w2 = one.buffers[W13][0], one.buffers[W2][0]
        s1, s2 = (torch.rand(A, device=dev, generator=g) + 0.5 for _ in range(2))
        sw13 = torch.rand(E, 2 * I, device=dev, generator=g) + 0.5
        sw2 = torch.rand(E, H, device=dev, generator=g) + 0.5
        runs["gemm_torch"] = lambda: (
            torch._scaled_grouped_mm(a1.q, w13.transpose(1, 2), s1, sw13, offs=offs_E, out_dtype=torch.bfloat16),
            torch._scaled_grouped_mm(a2.q, w2.transpose(1, 2), s2, sw2, offs=offs_E, out_dtype=torch.bfloat16))
    return {v: runs[v] for v in variants if v in runs}


def bf16_runs(spec, x_TH, ids_TK, w_TK, split, one) -> dict:
    from dwdp_trtllm.engine.moe_compute import sort_by_expert
    from dwdp_trtllm.integration.trtllm.moe_unit import W13, W2, routed_forward
    E, H, I, dev = spec.num_experts, spec.hidden_size, spec.moe_intermediate, x_TH.device
    _, offs_E, _ = sort_by_expert(ids_TK.long(), E)
    A = ids_TK.numel()
    a1 = torch.randn(A, H, device=dev, dtype=torch.bfloat16)
    a2 = torch.randn(A, I, device=dev, dtype=torch.bfloat16)
    w13, w2 = one.buffers[W13][0], one.buffers[W2][0]
    runs = {"op_bf16": lambda: routed_forward(x_TH, ids_TK, w_TK, split, torch.bfloat16),
            "gemm_bf16": lambda: (torch._grouped_mm(a1, w13.transpose(1, 2), offs=offs_E),
                                  torch._grouped_mm(a2, w2.transpose(1, 2), offs=offs_E))}
    tune = getattr(torch.ops.dwdp, "grouped_gemm_bf16_tune", None)
    if tune is None:  # a library from before the BF16 variants
        return runs
    ib, rb = split.expert_buffer_idx_E.to(torch.int32), split.expert_row_E.to(torch.int32)
    for v in torch.ops.dwdp.grouped_gemm_bf16_variants():  # fc1 + fc2 of each BF16 variant over the split
        runs[f"gemm_b_{v}"] = (lambda v=v: (tune(a1, offs_E, split.buffers[W13], ib, rb, v),
                                            tune(a2, offs_E, split.buffers[W2], ib, rb, v)))
    return runs


def bf16_sources(E, H, I, L, dev, g) -> tuple:
    from dwdp_trtllm.core.runtime import ExpertSources
    from dwdp_trtllm.engine.moe_compute import identity_map
    from dwdp_trtllm.integration.trtllm.moe_unit import W13, W2
    def draw(*shape):  # 16 experts at a time: R1's in float32 at once would take 28 GiB
        t = torch.empty(shape, device=dev, dtype=torch.bfloat16)
        for i in range(0, shape[0], 16):
            t[i:i + 16] = torch.randn(min(16, shape[0] - i), *shape[1:], device=dev, generator=g) / 64
        return t
    full = {W13: draw(E, 2 * I, H), W2: draw(E, H, I)}
    idx_E = torch.tensor([0] * L + [1] * (E - L), dtype=torch.int32, device=dev)
    row_E = torch.tensor(list(range(L)) + list(range(E - L)), dtype=torch.int32, device=dev)
    split = ExpertSources({n: [t[:L].clone(), t[L:].clone()] for n, t in full.items()}, idx_E, row_E)
    return split, ExpertSources({n: [t] for n, t in full.items()}, *identity_map(E, dev))


def tile_padding(ids_TK: torch.Tensor, num_experts: int, tile_rows: int = 128) -> float:
    """Rows the grouped GEMMs compute / rows routed: each expert's rows rounded up to whole M tiles of `tile_rows`
    (the FP8 kernels' 128-row tile), so 1.0 when every expert's rows are a multiple of the tile."""
    counts_E = torch.bincount(ids_TK.reshape(-1).long(), minlength=num_experts)
    return float(((counts_E + tile_rows - 1) // tile_rows).sum() * tile_rows) / max(int(counts_E.sum()), 1)


def time_point(runs: dict, rounds: int, time_fn) -> dict:
    per = {v: [] for v in runs}
    for _ in range(rounds):
        for v, fn in runs.items():
            per[v].append(time_fn(fn))
    return {v: sorted(ts)[len(ts) // 2] for v, ts in per.items()} | {f"{v}_range": [min(ts), max(ts)] for v, ts in per.items()}


def compare(out, ref) -> dict:
    d = (out.float() - ref.float())
    return {"max_abs": float(d.abs().max()), "rel": float(d.norm() / ref.float().norm().clamp_min(1e-30)),
            "equal": bool(torch.equal(out, ref))}


def table(rows: list[dict]) -> str:
    """One line per (dtype, routing, tokens, variant): ms median [min-max], PFLOP/s."""
    lines = ["variant          routing    tokens       ms [min-max]          PFLOP/s",
             "---------------- --------- ------- ------------------------- -------"]
    for r in rows:
        lo, hi = r["range"]
        lines.append(f"{r['variant']:16s} {r['routing']:9s} {r['tokens']:7d} {r['ms']:7.3f} [{lo:7.3f}-{hi:7.3f}]"
                     f"   {r['pflops']:6.3f}")
    return "\n".join(lines)


#: the variants that time dwdp::grouped_gemm (all but DeepGEMM's GEMMs and torch's): without the dwdp ops they would
#: time the torch reference the op falls back to, tens of times slower, so the run refuses instead
OPS_VARIANTS = ("op_cutlass", "op", "gemm_ours")


def ops_refusal(variants, bf16: bool, why_unavailable) -> str:
    """"" when every variant asked for times the kernels it names, else the one line the run exits 2 with."""
    need = [v for v in variants if v in OPS_VARIANTS] + (["--bf16"] if bf16 else [])
    why = why_unavailable() if need else ""
    return (f"bench_routed_op.py: {', '.join(need)} need the dwdp ops, unavailable here ({why}); run `dwdp build-ops "
            f"--cuda` with CUTLASS_DIR set (scripts/gpu_check.sh sets it), or drop those variants") if why else ""


def main(argv=None) -> int:
    args = parse_args(argv)
    import importlib
    refusal = ops_refusal(args.variants, args.bf16,
                          importlib.import_module("dwdp_trtllm.ops.grouped_gemm").why_unavailable)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    from triton.testing import do_bench
    from dwdp_trtllm.bench.report import write_atomic
    from dwdp_trtllm.spec.models import get_model
    spec = get_model("deepseek-r1")
    dev = torch.device("cuda", 0)
    E, H, I, K = spec.num_experts, spec.hidden_size, spec.moe_intermediate, spec.top_k
    time_fn = lambda fn: do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")  # noqa: E731
    g = torch.Generator(device=dev).manual_seed(0)
    meta = {"device": torch.cuda.get_device_name(dev), "date": time.strftime("%Y-%m-%d"),
            "command": "python3 scripts/bench_routed_op.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "torch": torch.__version__, **mop.commit_record(Path(__file__).resolve().parents[1])}
    rows, checks = [], {}
    sources = mop.expert_sources(E, H, I, args.local, dev, g)
    for routing in args.routings:
        for T in args.tokens:
            x_TH = torch.randn(T, H, device=dev, generator=g).to(torch.bfloat16)
            ids_TK, w_TK = mop._routing(spec, T, routing, dev, g)
            runs = fp8_runs(spec, x_TH, ids_TK, w_TK, sources, args.variants)
            t0 = time.time()
            outs = {v: runs[v]() for v in ("op_cutlass", "op_dg", "op", "op_one") if v in runs}
            torch.cuda.synchronize()
            first_s = time.time() - t0
            if "op_cutlass" in outs:
                checks[f"{routing}/{T}"] = {v: compare(o, outs["op_cutlass"]) for v, o in outs.items() if v != "op_cutlass"}
            del outs
            res = time_point(runs, args.rounds, time_fn)
            flop = 6.0 * T * K * H * I
            pad = tile_padding(ids_TK, E)
            for v in runs:
                rows.append({"dtype": "fp8", "variant": v, "routing": routing, "tokens": T, "ms": res[v],
                             "range": res[f"{v}_range"], "pflops": flop / res[v] / 1e12, "first_calls_s": first_s,
                             "tile_padding": pad})
            print(f"{routing} T={T} (128-row tiles: {pad:.3f}x the routed rows): "
                  + ", ".join(f"{v} {res[v]:.3f}" for v in runs) + " ms", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "routed_op.json", json.dumps({"meta": meta, "rows": rows, "op_vs_op_cutlass": checks}, indent=1))
    if args.bf16:  # the FP8 experts and every closure over them go first: BF16 R1 experts take 2 x 22.5 GB
        del sources, runs, res
        torch.cuda.empty_cache()
        split, one = bf16_sources(E, H, I, args.local, dev, g)
        for T in args.tokens:
            x_TH = torch.randn(T, H, device=dev, generator=g).to(torch.bfloat16)
            ids_TK, w_TK = mop._routing(spec, T, "uniform", dev, g)
            runs = bf16_runs(spec, x_TH, ids_TK, w_TK, split, one)
            res = time_point(runs, args.rounds, time_fn)
            for v in runs:
                rows.append({"dtype": "bf16", "variant": v, "routing": "uniform", "tokens": T, "ms": res[v],
                             "range": res[f"{v}_range"], "pflops": 6.0 * T * K * H * I / res[v] / 1e12})
            choice = (str(torch.ops.dwdp.grouped_gemm_bf16_choice(T * K, E))
                      if hasattr(torch.ops.dwdp, "grouped_gemm_bf16_choice") else "?")
            for r in rows[-len(runs):]:
                r["bf16_choice"] = choice
            print(f"bf16 T={T}: " + ", ".join(f"{v} {res[v]:.3f}" for v in runs) + f" ms (op runs {choice})",
                  flush=True)
    text = table(rows)
    write_atomic(out / "routed_op.json", json.dumps({"meta": meta, "rows": rows, "op_vs_op_cutlass": checks}, indent=1))
    write_atomic(out / "routed_op.md", f"# Routed-expert op, {meta['device']}, {meta['date']}, commit {meta['commit']}"
                 f"\n\n`{meta['command']}`\n\n```text\n{text}\n```\n\nop vs op_cutlass: {json.dumps(checks)}\n")
    print(text)
    print("op vs op_cutlass (same arithmetic, another GEMM kernel):")
    for k, v in checks.items():
        print(f"  {k}: " + "; ".join(f"{n} rel {c['rel']:.1e} equal {c['equal']}" for n, c in v.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
