#!/usr/bin/env python3
"""Our whole routed-expert op on DeepSeek-R1 shapes against TensorRT-LLM's Hopper fp8_block CUTLASS MoE:
the evidence of the TensorRT-LLM adapter's FP8 default on sm_90 (integration/gemm_choice.py choose_gemm).

Ours, timed here (CUDA): the multi_buffer execution unit's computation, integration/trtllm/moe_unit.routed_forward
(sort, gather + 1x128 quantisation, FP8 grouped GEMM, SwiGLU + quantisation, FP8 grouped GEMM, combine), on
TensorRT-LLM's weight layout (w3_w1_weight [E, 2I, H] up | gate, w2_weight [E, H, I], 128x128 fp32 scales), bf16
activations in, bf16 out, all E = 256 experts on the one GPU:
  multi_buffer  experts in two allocations [LOCAL local | E - LOCAL slot] (a DWDP rank's split; the adapter's path)
  contiguous    the same unit over one [E, ...] buffer (identity map): the single-range layout the composite view gives
  deepgemm      the engine's op with gemm: deepgemm (engine/moe_deepgemm.py: DeepGEMM's grouped GEMM on that one buffer,
                the gather writing its padded rows, the combine reading them; no pad/unpad pass), added when deep_gemm
                imports (--deepgemm auto; DWDP_DEEPGEMM_DIR names the built tree) or on request (--deepgemm on)
Theirs, not run (no tensorrt_llm wheel runs on our machines): aiconfigurator's H200 table, TensorRT-LLM 1.3.0rc20,
read through integration/moe_evidence.py (balanced row for uniform routing, power_law_1.01 for power-law routing).
Routing: uniform (K distinct experts per token, uniformly at random) or power_law (routing_skew power_law, alpha 1.01,
drawn for the token count, sampled as the engine's router does: engine/router.skew_select). Tokens: 4K / 8K / 16K
(the table's rows end at 16384). Timing: triton.testing.do_bench median per call, in --rounds interleaved rounds per point (every path once per
round, the same inputs); a time is the median of its rounds. The paths' outputs are compared with multi_buffer's
(the op reads each expert's rows alone, so they should be bit-equal: max_abs_diff); deepgemm's first call per point
(DeepGEMM JIT-compiles a kernel configuration it has not cached) is timed as first_call_s.
Writes <out>/moe_op_vs_trtllm.json and .md; prints the table. The commit recorded (commit_record) is DWDP_COMMIT when
set (the caller's commit of the copied tree), else this copy's .git HEAD, said as such, with whether the working tree
differs from it (a copied tree's .git can be stale).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dwdp_trtllm.integration import moe_evidence  # noqa: E402

PATHS = ("multi_buffer", "contiguous", "deepgemm")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="directory for moe_op_vs_trtllm.json / .md (required unless --prewarm-deepgemm)")
    ap.add_argument("--tokens", default=",".join(str(t) for t in moe_evidence.TOKENS),
                    help="comma-separated token counts, each at most 16384 (the table's last row)")
    ap.add_argument("--routings", default="uniform,power_law", help=f"of {', '.join(moe_evidence.TABLE_ROUTING)}")
    ap.add_argument("--paths", default="multi_buffer,contiguous", help=f"of {', '.join(PATHS)}")
    ap.add_argument("--deepgemm", choices=("auto", "on", "off"), default="auto",
                    help="add the deepgemm path: auto = when deep_gemm imports (CUDA), on = required (exit 2 without)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved timing rounds per point")
    ap.add_argument("--prewarm-deepgemm", default="", metavar="fc1|fc2",
                    help="only JIT-compile DeepGEMM's kernel for this GEMM of the op at every --tokens height, on "
                         "unset data, then exit (gpu_check.sh runs one process per GEMM and token count in parallel)")
    ap.add_argument("--local", type=int, default=32, help="multi_buffer: experts in the local buffer (rest: slot)")
    ap.add_argument("--warmup-ms", type=float, default=50)
    ap.add_argument("--rep-ms", type=float, default=300)
    args = ap.parse_args(argv)
    try:
        args.tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens: expected comma-separated integers, got {args.tokens!r}")
    if not args.out and not args.prewarm_deepgemm:
        ap.error("--out: required (a directory for the results)")
    if args.prewarm_deepgemm not in ("", "fc1", "fc2"):
        ap.error(f"--prewarm-deepgemm: expected fc1 or fc2, got {args.prewarm_deepgemm!r}")
    args.routings, args.paths = args.routings.split(","), args.paths.split(",")
    for name, vals, allowed in (("--routings", args.routings, moe_evidence.TABLE_ROUTING), ("--paths", args.paths, PATHS)):
        bad = [v for v in vals if v not in allowed]
        if bad:
            ap.error(f"{name}: {bad[0]!r} is not one of {', '.join(allowed)}")
    for t in args.tokens:
        if not 1 <= t <= moe_evidence.TOKENS[-1]:
            ap.error(f"--tokens: {t} is outside 1..{moe_evidence.TOKENS[-1]} (TensorRT-LLM's measured rows)")
    if args.rounds < 1:
        ap.error(f"--rounds: expected >= 1, got {args.rounds}")
    if not 0 < args.local < 256:
        ap.error(f"--local: expected 1..255 experts, got {args.local}")
    return args


def commit_record(repo: Path, environ=os.environ, git=None) -> dict:
    """What is knowable about the code that ran: DWDP_COMMIT when the caller sets it (the lead's commit of the copied
    tree; a device copy's .git can be stale: the run of 2026-12-03 18:28 recorded e08b959 while the tree was
    b3d9b1e), else this copy's `git rev-parse --short HEAD`; and whether the working tree differs from that commit
    (`git status --porcelain`: 'differs (N paths)', 'clean', 'unknown'). git(args) -> stdout or None (tests)."""
    def run_git(args):
        try:
            r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout if r.returncode == 0 else None
    git = git or run_git
    head = (git(["rev-parse", "--short", "HEAD"]) or "").strip() or "unknown"
    status = git(["status", "--porcelain"])
    tree = "unknown" if status is None else (
        f"differs from {head} ({len(status.splitlines())} paths)" if status.strip() else "clean")
    if environ.get("DWDP_COMMIT"):
        return {"commit": environ["DWDP_COMMIT"], "commit_source": "DWDP_COMMIT (set by the caller)",
                "git_head": head, "working_tree": tree}
    return {"commit": head, "commit_source": "this copy's .git HEAD (may be stale on a copied tree)",
            "git_head": head, "working_tree": tree}


def report(timings: dict, meta: dict, out: Path) -> str:
    """Rows from the timings beside TensorRT-LLM's table; JSON + markdown written atomically under out."""
    from dwdp_trtllm.bench.report import write_atomic
    rows = moe_evidence.comparison_rows(timings)
    md = (f"# Our routed-expert op vs TensorRT-LLM's fp8_block MoE, {meta.get('device', '?')}, commit "
          f"{meta.get('commit', '?')} ({meta.get('commit_source', '?')}; working tree "
          f"{meta.get('working_tree', '?')}), {meta.get('date', '?')}\n\n`{meta.get('command', '')}`\n\n"
          + moe_evidence.markdown(rows))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "moe_op_vs_trtllm.json", json.dumps({"meta": meta, "rows": rows}, indent=1))
    write_atomic(out / "moe_op_vs_trtllm.md", md)
    return md


def _fp8_experts(E, N, K, dev, g):
    """[E, N, K] e4m3 codes (N(0,1) * 64: the e4m3 range, no zeros) and [E, N/128, K/128] fp32 scales."""
    w = torch.empty(E, N, K, device=dev, dtype=torch.float8_e4m3fn)
    for i in range(0, E, 16):
        w[i:i + 16] = (torch.randn(min(16, E - i), N, K, device=dev, generator=g) * 64).to(w.dtype)
    return w, torch.rand(E, N // 128, K // 128, device=dev, generator=g) * 1e-3 + 1e-4


def expert_sources(E: int, H: int, I: int, L: int, dev, g) -> dict:
    """{path: ExpertSources} of one set of random FP8 experts in TensorRT-LLM's layout: contiguous (one [E, ...]
    buffer, identity map) and multi_buffer (copies of experts 0..L-1 in a local buffer, the rest in a slot)."""
    from dwdp_trtllm.engine.moe_compute import identity_map
    from dwdp_trtllm.integration.trtllm.moe_unit import W13, W13_SCALE, W2, W2_SCALE
    from dwdp_trtllm.core.runtime import ExpertSources
    full = {}
    full[W13], full[W13_SCALE] = _fp8_experts(E, 2 * I, H, dev, g)
    full[W2], full[W2_SCALE] = _fp8_experts(E, H, I, dev, g)
    idx_E = torch.tensor([0] * L + [1] * (E - L), dtype=torch.int32, device=dev)
    row_E = torch.tensor(list(range(L)) + list(range(E - L)), dtype=torch.int32, device=dev)
    return {"contiguous": ExpertSources({n: [t] for n, t in full.items()}, *identity_map(E, dev)),
            "multi_buffer": ExpertSources({n: [t[:L].clone(), t[L:].clone()] for n, t in full.items()}, idx_E, row_E)}


def _routing(spec, T, routing, dev, g):
    """(ids_TK int32 as TensorRT-LLM routes, scales_TK float32). uniform: each token's K experts drawn at random
    (rows per expert vary around T*K/E); balanced: expert (t*K + k) mod E, every expert the same rows when E divides
    T*K (as `dwdp calibrate` routes, calibrate/moe_op_timer.EngineMoeOp.routing); power_law: alpha 1.01."""
    from dwdp_trtllm.engine.router import SkewTable, skew_select
    from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig, popularity
    E, K = spec.num_experts, spec.top_k
    logits_TE = torch.randn(T, E, device=dev, generator=g)
    ids_TK = torch.rand(T, E, device=dev, generator=g).topk(K, dim=-1).indices
    if routing == "balanced":
        ids_TK = (torch.arange(T, device=dev)[:, None] * K + torch.arange(K, device=dev)[None, :]) % E
    w_TK = logits_TE.sigmoid().gather(1, ids_TK)
    if routing == "power_law":
        pop_E = popularity(RoutingSkewConfig(kind="power_law", alpha=1.01, tokens=T), 0, E, K)
        ids_TK, w_TK = skew_select(spec, logits_TE, ids_TK, SkewTable(pop_E[None], K, dev), 0)
    return ids_TK.to(torch.int32), (w_TK / w_TK.sum(-1, keepdim=True)).float()


def _engine_forward(gemm: str, x_TH, ids_TK, w_TK, src):
    """moe_unit.routed_forward's call of the engine's op with another gemm (the same arguments: bf16 activations,
    int64 ids, float32 scales, up_first, bf16 out)."""
    from dwdp_trtllm.engine.moe_compute import routed_experts_forward
    from dwdp_trtllm.integration.trtllm.moe_unit import UP_FIRST, W13, W13_SCALE, W2, W2_SCALE
    b = src.buffers
    return routed_experts_forward(x_TH, ids_TK.long(), w_TK, b[W13], b[W2], src.expert_buffer_idx_E, src.expert_row_E,
                                  gemm=gemm, w13_scale_sources=b[W13_SCALE], w2_scale_sources=b[W2_SCALE],
                                  up_first=UP_FIRST)


def measure(args, spec, dev, time_fn, notes: dict | None = None) -> tuple[dict, dict]:
    """({(path, routing, tokens): ms}, {routing/tokens: max |multi_buffer - contiguous|}) of the unit's computation
    (moe_unit.routed_forward; deepgemm: the engine's op with gemm deepgemm on the one buffer) on spec's shapes;
    time_fn(fn) -> ms (do_bench on the GPU), called once per path per round, rounds interleaved. notes (when given)
    collects per point deepgemm's first-call seconds, its max |deepgemm - multi_buffer| and whether they are equal."""
    from dwdp_trtllm.integration.trtllm.moe_unit import routed_forward
    g = torch.Generator(device=dev).manual_seed(0)
    sources = expert_sources(spec.num_experts, spec.hidden_size, spec.moe_intermediate, args.local, dev, g)
    sources["deepgemm"] = sources["contiguous"]
    timings, diffs = {}, {}
    for routing in args.routings:
        for T in args.tokens:
            x_TH = torch.randn(T, spec.hidden_size, device=dev, generator=g).to(torch.bfloat16)
            ids_TK, w_TK = _routing(spec, T, routing, dev, g)
            outs, runs = {}, {}
            for path in args.paths:
                src = sources[path]
                runs[path] = ((lambda src=src: _engine_forward("deepgemm", x_TH, ids_TK, w_TK, src)) if path == "deepgemm"
                              else (lambda src=src: routed_forward(x_TH, ids_TK, w_TK, src, torch.bfloat16)))
                t0 = time.time()
                outs[path] = runs[path]()
                if path == "deepgemm" and notes is not None:
                    if dev.type == "cuda":
                        torch.cuda.synchronize(dev)
                    notes.setdefault("first_call_s", {})[f"{routing}/{T}"] = time.time() - t0
            per: dict[str, list[float]] = {path: [] for path in args.paths}
            for _ in range(args.rounds):
                for path in args.paths:
                    per[path].append(time_fn(runs[path]))
            for path in args.paths:
                timings[(path, routing, T)] = sorted(per[path])[len(per[path]) // 2]
                print(f"{routing:9s} T={T:6d} {path:12s} {timings[(path, routing, T)]:7.3f} ms "
                      f"(rounds {', '.join(f'{v:.3f}' for v in per[path])})", flush=True)
            if "multi_buffer" in outs and "contiguous" in outs:
                diffs[f"{routing}/{T}"] = float((outs["multi_buffer"].float() - outs["contiguous"].float()).abs().max())
            if "multi_buffer" in outs and "deepgemm" in outs and notes is not None:
                d = (outs["deepgemm"].float() - outs["multi_buffer"].float())
                notes.setdefault("deepgemm_vs_multi_buffer_max_abs", {})[f"{routing}/{T}"] = float(d.abs().max())
                notes.setdefault("deepgemm_vs_multi_buffer_rel", {})[f"{routing}/{T}"] = float(
                    d.norm() / outs["multi_buffer"].float().norm())
                notes.setdefault("deepgemm_equals_multi_buffer", {})[f"{routing}/{T}"] = bool(
                    torch.equal(outs["deepgemm"], outs["multi_buffer"]))
            del outs, runs
    return timings, diffs


def deepgemm_wanted(mode: str, paths: list[str]) -> tuple[bool, str]:
    """(add or keep the deepgemm path, why): --deepgemm auto adds it when deep_gemm imports, on requires it."""
    from dwdp_trtllm.ops import deepgemm as dgl
    if mode == "off" and "deepgemm" not in paths:
        return False, "--deepgemm off"
    try:
        dg = dgl.module()
    except dgl.DeepGEMMUnavailable as e:
        if mode == "on" or "deepgemm" in paths:
            raise SystemExit(f"bench_moe_op_vs_trtllm: the deepgemm path was asked for: {e}") from None
        return False, f"deep_gemm not importable ({e})"
    return True, f"deep_gemm {getattr(dg, '__version__', '?')} from {Path(dg.__file__).parent}"


def prewarm_deepgemm(args, spec) -> int:
    """DeepGEMM compiles a kernel per configuration at its first call (nvcc, seconds each) and picks the configuration
    from M, N, K and the expert count, not from the data: one call per --tokens height (padded_height(T * top_k, E),
    what gemm: deepgemm allocates) of this GEMM's shape, every row marked -1 (nothing computed), compiles exactly what
    measure() will call."""
    from dwdp_trtllm.engine import moe_deepgemm
    from dwdp_trtllm.ops import deepgemm as dgl
    E, H, I = spec.num_experts, spec.hidden_size, spec.moe_intermediate
    N, Kd = (2 * I, H) if args.prewarm_deepgemm == "fc1" else (H, I)
    dg, dev, t0 = dgl.module(), torch.device("cuda", 0), time.time()
    w = torch.empty(E, N, Kd, device=dev, dtype=torch.float8_e4m3fn)
    ws = torch.ones(E, N // 128, Kd // 128, device=dev)
    for T in args.tokens:
        M = dgl.padded_height(T * spec.top_k, E)
        a = torch.empty(M, Kd, device=dev, dtype=torch.float8_e4m3fn)
        sa = torch.ones(Kd // 128, M, device=dev).t()  # MN-major, as the op passes them
        d = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        lay = torch.full((E,), 0, dtype=torch.int32, device=dev) if moe_deepgemm.USE_PSUM else \
            torch.full((M,), -1, dtype=torch.int32, device=dev)
        t1 = time.time()
        dg.m_grouped_fp8_gemm_nt_contiguous((a, sa), (w, ws), d, lay, use_psum_layout=moe_deepgemm.USE_PSUM)
        torch.cuda.synchronize()
        print(f"prewarm deepgemm {args.prewarm_deepgemm} T={T} M={M} N={N} K={Kd}: {time.time() - t1:.1f} s", flush=True)
        del a, sa, d, lay
    print(f"prewarm deepgemm {args.prewarm_deepgemm}: {time.time() - t0:.1f} s in all", flush=True)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_moe_op_vs_trtllm: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.prewarm_deepgemm:
        from dwdp_trtllm.spec.models import get_model
        return prewarm_deepgemm(args, get_model(moe_evidence.MODEL))
    from triton.testing import do_bench

    from dwdp_trtllm.bench.report import env_info
    from dwdp_trtllm.spec.models import get_model
    from dwdp_trtllm.ops.build import load

    load(cuda=True)
    try:
        use_dg, dg_why = deepgemm_wanted(args.deepgemm, args.paths)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if use_dg and "deepgemm" not in args.paths:
        args.paths.append("deepgemm")
    print(f"paths: {', '.join(args.paths)} (deepgemm: {dg_why})", flush=True)
    t0, notes = time.time(), {}
    timings, diffs = measure(args, get_model(moe_evidence.MODEL), torch.device("cuda", 0),
                             lambda f: do_bench(f, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median"), notes)
    env = env_info("cuda", device_name=torch.cuda.get_device_name(0))
    meta = {"date": env["date"][:10], **commit_record(Path(__file__).resolve().parents[1]),
            "device": env["device_name"], "torch": env["torch"],
            "command": env["argv"], "seconds": time.time() - t0, "local_experts": args.local,
            "max_abs_diff_multi_buffer_vs_contiguous": diffs, "rounds": args.rounds, "deepgemm": dg_why, **notes}
    print(report(timings, meta, Path(args.out)))
    print("max |multi_buffer - contiguous|:", diffs)
    for k, v in notes.items():
        print(f"{k}:", v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
