#!/usr/bin/env python3
"""Many-to-one contention and peer bandwidth on >= 2 GPUs of one host (one process drives them all).

Measures (bytes moved once per second, i.e. one-way link bytes, not read+write):
1. peer bandwidth per ordered GPU pair: one-way pull j <- i, and bidirectional (i <- j and j <- i at once);
2. many-to-one: G-1 destinations pull B bytes each from GPU 0 at once, unsliced (one op) vs sliced
   (2 MiB, one batched call), against one destination alone;
3. full DWDP prefetch of one DeepSeek-R1 fp8 layer over G = all GPUs: every rank pulls its plan from
   all peers at once, sequential by source (unsliced plan) vs round-robin slices (sliced plan).
Copies are issued on each DESTINATION's copy stream (pulls, as DWDP does) through CopyScheduler's
batched path; peer access is enabled through torch. Each destination's time comes from its own
events (starts are aligned by a spin kernel queued before every start event).

    python scripts/dev/bench_contention_multi.py --out $OUT
Exits 0 with a message when fewer than 2 GPUs are visible (it is meant for a multi-GPU machine).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dwdp_trtllm.bench.checks import exit_code  # noqa: E402
from dwdp_trtllm.spec.config import DwdpConfig  # noqa: E402
from dwdp_trtllm.core.copy_plan import CopyOp, CopyPlan, build_copy_plan  # noqa: E402
from dwdp_trtllm.core.copy_scheduler import CopyScheduler  # noqa: E402
from dwdp_trtllm.core.placement import make_placement  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
CLOCK_HZ = 1.98e9


def spin(dev: int, seconds: float, stream) -> None:
    with torch.cuda.device(dev), torch.cuda.stream(stream):
        torch.cuda._sleep(int(seconds * CLOCK_HZ))


def enable_peer_access(n: int) -> None:
    for i in range(n):
        for j in range(n):
            if i != j and not torch.cuda.can_device_access_peer(i, j):
                print(f"warning: GPU {i} cannot access GPU {j} directly; copies between them are staged")
    # A tiny cross-device copy makes torch enable peer access between every pair (primary contexts).
    for i in range(n):
        for j in range(n):
            if i != j:
                torch.ones(1, device=f"cuda:{i}").to(f"cuda:{j}")
    torch.cuda.synchronize()


def pull_plan(nbytes: int, source: int, slice_bytes: int) -> CopyPlan:
    """One destination pulls `nbytes` from `source` (tensor 0), in slices or as one op."""
    step = slice_bytes or nbytes
    return CopyPlan(0, tuple(CopyOp(source, 0, o, o, min(step, nbytes - o)) for o in range(0, nbytes, step)),
                    sliced=bool(slice_bytes))


def concurrent(jobs: list[tuple[int, CopyScheduler]], reps: int) -> list[float]:
    """Run every (dest, scheduler) at once; median per-destination device ms."""
    times: list[list[float]] = [[] for _ in jobs]
    for _ in range(reps):
        for dest, sched in jobs:
            spin(dest, 3e-3, sched.stream)
        handles = [sched.issue(0, 0) for _, sched in jobs]
        for k, h in enumerate(handles):
            h.synchronize(120)
            times[k].append(h.elapsed_ms())
    return [statistics.median(t) for t in times]


def sched_for(dest: int, plan: CopyPlan, src: dict, dst: list) -> CopyScheduler:
    return CopyScheduler(plan, src_buffer=lambda p, layer, t: src[(p, t)], dst_buffer=lambda s, t: dst[t],
                         layers=[0], num_slots=1, device=torch.device("cuda", dest), method="batch")


def peer_bandwidth(n: int, nbytes: int, reps: int) -> list[dict]:
    bufs = {i: torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)}
    dsts = {i: torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)}
    rows = []
    for i in range(n):
        for j in range(i + 1, n):
            s_ji = sched_for(j, pull_plan(nbytes, i, 0), {(i, 0): bufs[i]}, [dsts[j]])
            s_ij = sched_for(i, pull_plan(nbytes, j, 0), {(j, 0): bufs[j]}, [dsts[i]])
            one = concurrent([(j, s_ji)], reps)[0]
            both = concurrent([(j, s_ji), (i, s_ij)], reps)
            ok = torch.equal(dsts[j].cpu(), bufs[i].cpu()) and torch.equal(dsts[i].cpu(), bufs[j].cpu())
            rows.append({"pair": f"{i}<->{j}", "one_way_GBps": nbytes / one / 1e6,
                         "bidir_GBps_each": [nbytes / t / 1e6 for t in both],
                         "bidir_GBps_total": sum(nbytes / t / 1e6 for t in both), "exact": ok})
            print(f"  {i}->{j}: {rows[-1]['one_way_GBps']:.0f} GB/s one way, {rows[-1]['bidir_GBps_total']:.0f} both ways",
                  flush=True)
            s_ji.close(), s_ij.close()
    return rows


def many_to_one(n: int, nbytes: int, reps: int) -> list[dict]:
    src = {(0, 0): torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda:0")}
    dsts = {d: [torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}")] for d in range(1, n)}
    rows = []
    for slice_bytes in (0, 2 * MiB):
        plan = pull_plan(nbytes, 0, slice_bytes)
        scheds = [(d, sched_for(d, plan, src, dsts[d])) for d in range(1, n)]
        alone = concurrent(scheds[:1], reps)[0]
        together = concurrent(scheds, reps)
        ok = all(torch.equal(dsts[d][0].cpu(), src[(0, 0)].cpu()) for d in range(1, n))
        rows.append({"slice_bytes": slice_bytes, "destinations": n - 1, "alone_ms": alone,
                     "alone_GBps": nbytes / alone / 1e6, "together_ms": together,
                     "source_egress_GBps": (n - 1) * nbytes / max(together) / 1e6,
                     "slowdown_vs_alone": max(together) / alone, "exact": ok})
        print(f"  {n - 1} -> GPU 0 pulls, slice {slice_bytes // MiB or 'none'}: alone {alone:.2f} ms, "
              f"together max {max(together):.2f} ms ({rows[-1]['slowdown_vs_alone']:.2f}x)", flush=True)
        for _, s in scheds:
            s.close()
    return rows


def full_group(n: int, reps: int) -> list[dict]:
    from dwdp_trtllm.core.expert_buffers import expert_layout
    from dwdp_trtllm.spec.models import get_model
    layout = expert_layout(get_model("deepseek-r1"), "fp8")
    placement = make_placement(DwdpConfig(dwdp_size=n), 256)
    src = {(p, t): torch.randint(0, 256, (len(placement.local_experts[p]) * nb,), dtype=torch.uint8, device=f"cuda:{p}")
           for p in range(n) for t, nb in enumerate(layout.tensor_bytes)}
    dst = {r: [torch.empty(len(placement.fetch_experts(r)) * nb, dtype=torch.uint8, device=f"cuda:{r}")
               for nb in layout.tensor_bytes] for r in range(n)}
    rows = []
    for name, sliced in (("sequential by source (unsliced)", False), ("round-robin 2 MiB slices", True)):
        plans = {r: build_copy_plan(placement, layout, r, sliced=sliced) for r in range(n)}
        scheds = [(r, sched_for(r, plans[r], src, dst[r])) for r in range(n)]
        times = concurrent(scheds, reps)
        total = sum(p.total_bytes for p in plans.values())
        rows.append({"variant": name, "G": n, "per_rank_ms": times, "max_ms": max(times),
                     "per_rank_GBps": [plans[r].total_bytes / t / 1e6 for r, t in enumerate(times)],
                     "aggregate_GBps": total / max(times) / 1e6})
        print(f"  G={n} {name}: max {max(times):.2f} ms, aggregate {rows[-1]['aggregate_GBps']:.0f} GB/s", flush=True)
        for _, s in scheds:
            s.close()
    return rows


def markdown(res: dict) -> str:
    out = [f"# Peer copy contention ({res['gpus']} x {res['device']}, {res['date']})", "",
           "## Peer bandwidth (one-way bytes/s)", "", "| pair | one way GB/s | both ways GB/s | exact |", "|---|---|---|---|"]
    out += [f"| {r['pair']} | {r['one_way_GBps']:.0f} | {r['bidir_GBps_total']:.0f} | {r['exact']} |" for r in res["peer"]]
    out += ["", "## Many-to-one: destinations pulling from GPU 0 at once", "",
            "| slice | dests | alone GB/s | together max ms | source egress GB/s | slowdown | exact |",
            "|---|---|---|---|---|---|---|"]
    out += [f"| {r['slice_bytes'] // MiB or 'none'} | {r['destinations']} | {r['alone_GBps']:.0f} | "
            f"{max(r['together_ms']):.2f} | {r['source_egress_GBps']:.0f} | {r['slowdown_vs_alone']:.2f} | {r['exact']} |"
            for r in res["many_to_one"]]
    out += ["", "## Full-group prefetch of one DeepSeek-R1 fp8 layer", "",
            "| variant | G | max ms | aggregate GB/s |", "|---|---|---|---|"]
    out += [f"| {r['variant']} | {r['G']} | {r['max_ms']:.2f} | {r['aggregate_GBps']:.0f} |" for r in res["full_group"]]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bytes", type=int, default=GiB, help="bytes per pull in the pair and many-to-one tests")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        print(f"bench_contention_multi.py needs >= 2 GPUs, found {n}: nothing to measure (run it on a multi-GPU machine)")
        return 0
    enable_peer_access(n)
    res = {"gpus": n, "device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    print("peer bandwidth ...", flush=True)
    res["peer"] = peer_bandwidth(n, args.bytes, args.reps)
    print("many-to-one ...", flush=True)
    res["many_to_one"] = many_to_one(n, args.bytes, args.reps)
    print("full group ...", flush=True)
    res["full_group"] = full_group(n, args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "contention_multi.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (args.out / "contention_multi.md").write_text(md)
    print(md)
    return exit_code(res, name="bench_contention_multi")  # every pull must be bit-exact


if __name__ == "__main__":
    raise SystemExit(main())
