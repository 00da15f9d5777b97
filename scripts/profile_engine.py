"""Where the engine's time goes on one GPU: torch.profiler over one forward of the reference model
(all experts local, no communication), kernel table by CUDA time, plus the engine's own phase times.

    python3 scripts/profile_engine.py --out DIR [--isl 8192] [--tokens 16384] [--weight-dtype bf16|fp8]
        [--gemm merge|multi_buffer] [--layers 3] [--first-k-dense 1]

Writes DIR/profile_<tag>.txt (kernel table) and DIR/profile_<tag>.json (phase times per iteration).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dwdp_trtllm.engine.model import build_reference_model
from dwdp_trtllm.engine.records import Segment
from dwdp_trtllm.engine.timing import PhaseTimer
from dwdp_trtllm.models import get_model


def segments_for(tokens: int, isl: int) -> list[Segment]:
    out, rid, left = [], 0, tokens
    while left > 0:
        n = min(isl, left)
        out.append(Segment(rid, 0, n, True))
        rid, left = rid + 1, left - n
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--isl", type=int, default=8192)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--weight-dtype", default="bf16")
    ap.add_argument("--gemm", default="merge")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--first-k-dense", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--preset", default="deepseek-r1")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{args.weight_dtype}_{args.gemm}_isl{args.isl}_t{args.tokens}"
    spec = get_model(args.preset, num_layers=args.layers, first_k_dense=args.first_k_dense)
    dev = torch.device(args.device)
    t0 = time.perf_counter()
    model = build_reference_model(spec, 0, torch.bfloat16, dev, gemm=args.gemm, weight_dtype=args.weight_dtype, on_device=True)
    print(f"[{tag}] built in {time.perf_counter() - t0:.1f} s", flush=True)
    g = torch.Generator(device=dev).manual_seed(1)
    ids = torch.randint(0, spec.vocab_size, (args.tokens,), device=dev, generator=g)
    segs = segments_for(args.tokens, args.isl)
    for _ in range(2):
        model.forward(ids, segs)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    timer = PhaseTimer(dev)
    phases = []
    walls = []
    for _ in range(args.iters):
        timer.start()
        t = time.perf_counter()
        model.forward(ids, segs, timer=timer)
        sync()
        walls.append(time.perf_counter() - t)
        agg: dict[str, float] = {}
        for name, layer, s, e in timer.collect():
            agg[name] = agg.get(name, 0.0) + (e - s) * 1e3
        phases.append(agg)
    print(f"[{tag}] wall ms per iteration: {[round(w * 1e3, 1) for w in walls]}")
    print(f"[{tag}] phase ms per iteration (last): { {k: round(v, 1) for k, v in phases[-1].items()} }")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        model.forward(ids, segs)
        sync()
    table = prof.key_averages().table(sort_by="cuda_time_total" if dev.type == "cuda" else "cpu_time_total", row_limit=60, max_name_column_width=90)
    shapes = prof.key_averages(group_by_input_shape=True).table(sort_by="cuda_time_total" if dev.type == "cuda" else "cpu_time_total", row_limit=40,
                                                                 max_name_column_width=60, max_shapes_column_width=80)
    (out / f"profile_{tag}.txt").write_text(table + "\n\n" + shapes)
    (out / f"profile_{tag}.json").write_text(json.dumps({"walls_ms": [w * 1e3 for w in walls], "phases_ms": phases}, indent=1))
    print(table[:6000])


if __name__ == "__main__":
    main()
