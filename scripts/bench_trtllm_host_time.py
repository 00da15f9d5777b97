"""Host time per DeepSeek-R1 MoE layer on the forward thread: TensorRT-LLM adapter (new) vs the old per-op path.

Old path (integration/pipeline.py before the composite view): one Python Tensor.copy_ per op of the full-slot op list
(local + peer experts), issued from the MoE pre-hook on the forward thread.
New path (integration/adapter.py): LayerSlots.acquire (one stream wait) + binding the prebuilt [E, ...] views
(one param.data store per tensor) + LayerSlots.release (one event record + one CopyScheduler issue = one CUDA
graph replay of the layer's slices; the forward start, LayerSlots.begin_forward, in the first layer's time). Composite view: only peer slices (local experts are mapped); merge: local
ones too.
One process, one GPU: the "peers'" exported buffers are plain allocations on the same device (host-side cost
does not depend on where the bytes live). DWDP4, rank 1, FP8 block scales, contention_opt on, 2 MiB slices.

    python3 scripts/bench_trtllm_host_time.py --out DIR [--dwdp-size 4] [--layers 4] [--iters 20]
writes DIR/trtllm_host_time.json: per path, host ms per layer (median, p90), op counts, target < 1 ms.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.core.copy_plan import CopyPlan, build_copy_plan
from dwdp_trtllm.core.copy_scheduler import CopyScheduler
from dwdp_trtllm.core.expert_buffers import expert_layout
from dwdp_trtllm.integration.full_slot import full_slot_ops
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.core.placement import make_placement
from dwdp_trtllm.core.prefetcher import LayerSlots


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dwdp-size", type=int, default=4)
    ap.add_argument("--rank", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4, help="MoE layers in the ring (sources shared between layers)")
    ap.add_argument("--iters", type=int, default=20, help="forwards timed per path")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_trtllm_host_time: needs a CUDA GPU")
    dev = torch.device("cuda", 0)
    spec = PRESETS["deepseek-r1"]
    cfg = DwdpConfig(dwdp_size=a.dwdp_size, weight_dtype="fp8", contention_opt=True)
    placement = make_placement(cfg, spec.num_experts)
    layout = expert_layout(spec, "fp8")
    E, rank, L, S = spec.num_experts, a.rank, a.layers, cfg.num_slots
    n_local = len(placement.local_experts[rank])
    plan = build_copy_plan(placement, layout, rank, sliced=True, slice_bytes=cfg.slice_bytes)
    full = full_slot_ops(placement, layout, rank, plan)
    src = {(p, t): torch.empty(len(placement.local_experts[p]) * nb, dtype=torch.uint8, device=dev)
           for p in range(a.dwdp_size) for t, nb in enumerate(layout.tensor_bytes)}
    slots = [[torch.empty(E * nb, dtype=torch.uint8, device=dev) for nb in layout.tensor_bytes] for _ in range(S)]
    params = [torch.nn.Parameter(torch.empty(1, device=dev), requires_grad=False) for _ in layout.tensor_names]
    views = [[slots[s][t].view(E, -1) for t in range(len(layout.tensor_names))] for s in range(S)]
    result = {"model": "deepseek-r1", "weight_dtype": "fp8", "dwdp_size": a.dwdp_size, "rank": rank,
              "n_local": n_local, "slice_bytes": cfg.slice_bytes, "target_ms": 1.0, "paths": {}}

    def old_layer(pos: int) -> None:  # the removed SlotCopyExecutor._copy + bind
        slot = pos % S
        for op in full:
            s = src[(op.source_rank, op.tensor_idx)]
            slots[slot][op.tensor_idx][op.dst_offset:op.dst_offset + op.nbytes].copy_(
                s[op.src_offset:op.src_offset + op.nbytes], non_blocking=True)
        for p, v in zip(params, views[slot]):
            p.data = v

    def timed(fn) -> list[float]:
        per_layer = []
        for _ in range(a.iters):
            for pos in range(L):
                t0 = time.perf_counter()
                fn(pos)
                per_layer.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize(dev)
        return per_layer

    def summary(ms: list[float], ops: int) -> dict:
        q = statistics.quantiles(ms, n=10)
        return {"host_ms_per_layer_median": statistics.median(ms), "host_ms_per_layer_p90": q[-1], "ops_per_layer": ops}

    result["paths"]["old_per_op"] = summary(timed(old_layer), len(full))
    for name, ops in (("new_composite", plan.ops), ("new_merge", full)):
        sched = CopyScheduler(CopyPlan(rank, tuple(ops), True), src_buffer=lambda p, l, t: src[(p, t)],
                              dst_buffer=lambda s, t: slots[s][t], layers=range(L), num_slots=S, device=dev)
        pf = LayerSlots(sched, num_layers=L, num_slots=S, device=dev)
        pf.start()

        def new_layer(pos: int) -> None:  # HopperDwdpManager.wait_and_bind (+ forward start) + release
            if pos == 0:
                pf.begin_forward()
            slot = pf.acquire(pos)
            for p, v in zip(params, views[slot]):
                p.data = v
            pf.release(pos)

        result["paths"][name] = summary(timed(new_layer), len(ops))
        pf.drain()
        sched.close()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "trtllm_host_time.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
