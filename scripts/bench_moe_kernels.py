#!/usr/bin/env python3
"""The MoE layer's non-GEMM kernels on DeepSeek-R1 shapes (one rank, T tokens x top-8), each variant side by side:

  router    the eager grouped sigmoid top-k chain (router.select_grouped_sigmoid, fusing off) vs the Triton kernel
            (engine/router_cuda.py), both from the same float32 logits (sigmoid included)
  combine   engine/combine_cuda.py at several (BLOCK_H, num_warps) tiles, every tile checked bit-equal to the
            default; GB/s counts the [T*K, H] rows read and the [T, H] output written
  residual  `y + shared` then add_rms_norm (two passes) vs add_rms_norm(x, y, w, eps, shared) (one pass)

Timing: triton.testing.do_bench, median ms. Writes <out>/moe_kernels.json and prints a markdown table.
Shape legend: T tokens, K top-k, H hidden, E experts.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dwdp_trtllm.engine import router, router_cuda  # noqa: E402
from dwdp_trtllm.engine.combine_cuda import combine_cuda  # noqa: E402
from dwdp_trtllm.engine.layers import add_rms_norm  # noqa: E402
from dwdp_trtllm.engine.moe_compute import inverse_permutation, sort_by_expert  # noqa: E402
from dwdp_trtllm.bench.report import write_atomic  # noqa: E402

TILES = [(1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8), (8192, 8), (8192, 16)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for moe_kernels.json")
    ap.add_argument("--tokens", type=int, default=16384)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_moe_kernels: needs a CUDA GPU", file=sys.stderr)
        return 2
    from triton.testing import do_bench

    T, E, K, H, G, TG = args.tokens, 256, 8, 7168, 8, 4
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    rows: list[dict] = []

    def add(kernel, variant, ms, nbytes=0, note=""):
        rows.append({"kernel": kernel, "variant": variant, "ms": ms, "GB_per_s": nbytes / ms / 1e6 if nbytes else None,
                     "note": note})

    # router
    logits = torch.randn(T, E, device=dev, generator=g) * 3
    bias = torch.randn(E, device=dev, generator=g) * 0.1
    sp = SimpleNamespace(num_experts=E, n_group=G, topk_group=TG, top_k=K, norm_topk_prob=True, routed_scaling_factor=2.5)
    fused_on = router.fused_enabled
    router.fused_enabled = lambda: False
    ids_ref, _ = router.select_grouped_sigmoid(sp, logits, bias)
    add("router", "eager chain", do_bench(lambda: router.select_grouped_sigmoid(sp, logits, bias)))
    router.fused_enabled = fused_on
    ids, _ = router.select_grouped_sigmoid(sp, logits, bias)
    assert torch.equal(ids, ids_ref), "router kernel chose other experts than the eager chain"
    add("router", "triton kernel", do_bench(lambda: router.select_grouped_sigmoid(sp, logits, bias)))

    # sort + inverse permutation (context for the combine)
    perm_A, _, _ = sort_by_expert(ids, E)
    add("sort", "sort_by_expert", do_bench(lambda: sort_by_expert(ids, E)))
    inv_A = inverse_permutation(perm_A)
    add("sort", "inverse_permutation", do_bench(lambda: inverse_permutation(perm_A)))

    # combine
    y_AH = torch.randn(T * K, H, device=dev, dtype=torch.bfloat16, generator=g)
    w_TK = torch.rand(T, K, device=dev, generator=g)
    nbytes = y_AH.numel() * 2 + T * H * 2
    want = combine_cuda(y_AH, inv_A, w_TK, torch.bfloat16)
    for bh, nw in TILES:
        got = combine_cuda(y_AH, inv_A, w_TK, torch.bfloat16, block_h=bh, num_warps=nw)
        same = bool(torch.equal(got, want))
        add("combine", f"BLOCK_H {bh}, {nw} warps",
            do_bench(lambda: combine_cuda(y_AH, inv_A, w_TK, torch.bfloat16, block_h=bh, num_warps=nw)), nbytes,
            "" if same else "NOT bit-equal to the default tile")
    del y_AH

    # residual add of routed + shared experts
    x, y, sh = (torch.randn(T, H, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    wn = torch.rand(H, device=dev, generator=g) + 0.5
    assert torch.equal(add_rms_norm(x, y, wn, 1e-6, sh)[0], x + (y + sh))
    add("residual", "y + shared, then add_rms_norm", do_bench(lambda: add_rms_norm(x, y + sh, wn, 1e-6)), 6 * T * H * 2)
    add("residual", "add_rms_norm(x, y, w, eps, shared)", do_bench(lambda: add_rms_norm(x, y, wn, 1e-6, sh)), 5 * T * H * 2)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "tokens": T, "experts": E, "top_k": K, "hidden": H,
            "timing": "triton.testing.do_bench median", "rows": rows}
    write_atomic(out / "moe_kernels.json", json.dumps(meta, indent=2))
    print(f"| kernel | variant | ms | GB/s | note |  ({meta['device']}, T={T}, K={K}, H={H})")
    print("|---|---|---|---|---|")
    for r in rows:
        gbs = f"{r['GB_per_s']:.0f}" if r["GB_per_s"] else ""
        print(f"| {r['kernel']} | {r['variant']} | {r['ms']:.3f} | {gbs} | {r['note']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
