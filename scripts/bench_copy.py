#!/usr/bin/env python3
"""Copy-engine benchmark on ONE GPU: bulk vs sliced (per-op vs batched), host issue time of a
DeepSeek-R1 layer's plan, and GEMM slowdown under concurrent copies with and without pacing.

Bandwidths count bytes read + written (2 x copied bytes) per second, like DESIGN.md 5. Device
times are CUDA events on the copy stream; a spin kernel (torch.cuda._sleep) queued before the
start event hides the host's issue time from them, and the host issue time is reported apart.
On one GPU, "peers" are local buffers (D2D through HBM, not NVLink): the numbers bound the copy
engines' and the driver's costs, not the link.

    python scripts/bench_copy.py --out $OUT            # full run (~1 min on an H200)
    python scripts/bench_copy.py --out /tmp/b --quick  # smaller sizes
Writes copy_bench.json and copy_bench.md into --out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dwdp_trtllm.bench.checks import exit_code  # noqa: E402
from dwdp_trtllm.spec.config import DwdpConfig  # noqa: E402
from dwdp_trtllm.core.copy_plan import CopyOp, CopyPlan, build_copy_plan  # noqa: E402
from dwdp_trtllm.core.copy_scheduler import CopyScheduler  # noqa: E402
from dwdp_trtllm.core.expert_buffers import expert_layout  # noqa: E402
from dwdp_trtllm.core.memcpy import BatchMemcpy, per_op_memcpy  # noqa: E402
from dwdp_trtllm.spec.models import get_model  # noqa: E402
from dwdp_trtllm.core.placement import make_placement  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CLOCK_HZ = 1.98e9  # H200 boost clock, only to size the spin kernel


def spin(seconds: float) -> None:
    torch.cuda._sleep(int(seconds * CLOCK_HZ))


def rand_bytes(n: int, dev) -> torch.Tensor:
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev)


def timed(issue, stream, reps: int, hide_s: float) -> tuple[float, float]:
    """(median device ms, median host issue us) of `issue()` enqueued on `stream`."""
    dev_ms, host_us = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            spin(hide_s)
        a.record(stream)
        t0 = time.perf_counter()
        issue()
        host_us.append((time.perf_counter() - t0) * 1e6)
        b.record(stream)
        b.synchronize()
        dev_ms.append(a.elapsed_time(b))
    return statistics.median(dev_ms), statistics.median(host_us)


def bulk(dev, nbytes: int, reps: int) -> dict:
    src, dst = rand_bytes(nbytes, dev), torch.empty(nbytes, dtype=torch.uint8, device=dev)
    s = torch.cuda.Stream(dev)
    batch = BatchMemcpy()
    arrs = BatchMemcpy.arrays([dst.data_ptr()], [src.data_ptr()], [nbytes])

    def torch_copy():
        with torch.cuda.stream(s):
            dst.copy_(src)

    ms_t, _ = timed(torch_copy, s, reps, 2e-3)
    ms_b, us_b = timed(lambda: batch(*arrs, s.cuda_stream), s, reps, 2e-3)
    assert torch.equal(dst, src)
    return {"bytes": nbytes, "torch_ms": ms_t, "torch_GBps": 2 * nbytes / ms_t / 1e6,
            "batch1_ms": ms_b, "batch1_GBps": 2 * nbytes / ms_b / 1e6, "batch1_issue_us": us_b}


def sliced(dev, nbytes: int, slice_sizes, reps: int, bulk_GBps: float) -> list[dict]:
    src, dst = rand_bytes(nbytes, dev), torch.empty(nbytes, dtype=torch.uint8, device=dev)
    s = torch.cuda.Stream(dev)
    batch = BatchMemcpy()
    from dwdp_trtllm.core.cuda_utils import cuda_bindings
    runtime, _ = cuda_bindings()
    rows, graphs, streams = [], [], {}
    for sz in slice_sizes:
        offs = list(range(0, nbytes, sz))
        d = [dst.data_ptr() + o for o in offs]
        sr = [src.data_ptr() + o for o in offs]
        n = [min(sz, nbytes - o) for o in offs]
        arrs = BatchMemcpy.arrays(d, sr, n)
        row = {"slice_bytes": sz, "ops": len(offs)}
        # size the spin from a dry run so host issue time never shows in device time
        t0 = time.perf_counter()
        per_op_memcpy(d, sr, n, s.cuda_stream)
        hide = 2 * (time.perf_counter() - t0) + 2e-3
        torch.cuda.synchronize()
        attr = runtime.cudaMemcpyAttributes()
        attr.srcAccessOrder = runtime.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream
        variants = {
            "per_op": lambda: per_op_memcpy(d, sr, n, s.cuda_stream),
            "batch": lambda: batch(*arrs, s.cuda_stream),
            # cuda.bindings' own wrapper: marshals Python lists on every call
            "batch_pylist": lambda: runtime.cudaMemcpyBatchAsync(d, sr, n, len(d), [attr], [0], 1, s.cuda_stream),
        }
        plan = CopyPlan(0, tuple(CopyOp(1, 0, o, o, k) for o, k in zip(offs, n)), sliced=True)
        for lanes in (1, 4):
            try:
                g = CopyScheduler(plan, src_buffer=lambda p, layer, t: src, dst_buffer=lambda sl, t: dst, layers=[0],
                                  num_slots=1, device=dev, method="graph", lanes=lanes)
                g.issue(0, 0).synchronize(60)  # first launch uploads the graph
            except Exception as e:  # noqa: BLE001 - report, keep benchmarking
                row[f"graph{lanes}_error"] = repr(e)[:200]
                continue
            graphs.append(g)
            streams[f"graph{lanes}"] = g.stream
            variants[f"graph{lanes}"] = (lambda g=g: g.issue(0, 0))
        for name, fn in variants.items():
            dst.fill_(0)
            torch.cuda.synchronize()  # the fill runs on another stream than the copies
            try:
                ms, us = timed(fn, streams.get(name, s), reps, hide)
            except Exception as e:  # noqa: BLE001 - report, keep benchmarking
                row[f"{name}_error"] = repr(e)[:200]
                continue
            ok = torch.equal(dst, src)
            row.update({f"{name}_GBps": 2 * nbytes / ms / 1e6, f"{name}_frac_bulk": 2 * nbytes / ms / 1e6 / bulk_GBps,
                        f"{name}_issue_us": us, f"{name}_exact": ok})
        for g in graphs:
            g.close()
        graphs.clear()
        rows.append(row)
        print(f"  slice {sz // KiB:6d} KiB x {len(offs):5d}: " + ", ".join(
            f"{k} {row.get(k + '_GBps', float('nan')):7.0f} GB/s ({row.get(k + '_issue_us', float('nan')):8.0f} us)"
            for k in variants), flush=True)
    return rows


class R1Layer:
    """One DeepSeek-R1 MoE layer's pulls for dwdp_rank 0 of G=4: 3 'peers' stood in by local buffers."""

    def __init__(self, dev, weight_dtype: str, G: int = 4, slice_bytes: int = 2 * MiB, sliced_plan: bool = True):
        self.layout = expert_layout(get_model("deepseek-r1"), weight_dtype)
        self.placement = make_placement(DwdpConfig(dwdp_size=G), 256)
        self.plan = build_copy_plan(self.placement, self.layout, 0, sliced=sliced_plan, slice_bytes=slice_bytes)
        self.src = {(p, t): rand_bytes(len(self.placement.local_experts[p]) * nb, dev)
                    for p in range(1, G) for t, nb in enumerate(self.layout.tensor_bytes)}
        n = len(self.placement.fetch_experts(0))
        self.dst = [torch.empty(n * nb, dtype=torch.uint8, device=dev) for nb in self.layout.tensor_bytes]
        self.dev = dev

    def replan(self, sliced_plan: bool, slice_bytes: int = 2 * MiB) -> CopyPlan:
        return build_copy_plan(self.placement, self.layout, 0, sliced=sliced_plan, slice_bytes=slice_bytes)

    def scheduler(self, method="batch", max_inflight_slices=0, plan: CopyPlan | None = None, lanes=0) -> CopyScheduler:
        return CopyScheduler(plan or self.plan, src_buffer=lambda p, layer, t: self.src[(p, t)],
                             dst_buffer=lambda s, t: self.dst[t], layers=[0], num_slots=1, device=self.dev,
                             method=method, max_inflight_slices=max_inflight_slices, lanes=lanes)

    def check(self) -> bool:
        nbs = self.layout.tensor_bytes
        for t, nb in enumerate(nbs):
            want = torch.cat([self.src[(s, t)].view(-1, nb)[self.placement.local_experts[s].index(e)]
                              for e, s in self.placement.sources[0]])
            if not torch.equal(self.dst[t], want):
                return False
        return True


def issue_time(dev, weight_dtype: str, reps: int) -> dict:
    layer = R1Layer(dev, weight_dtype)
    out = {"dtype": weight_dtype, "ops": len(layer.plan.ops), "bytes": layer.plan.total_bytes,
           "bytes_per_source": layer.plan.bytes_per_source()}
    for method, inflight, lanes in (("batch", 0, 0), ("batch", 64, 0), ("graph", 0, 0), ("graph", 0, 1),
                                    ("per_op", 0, 0), ("torch", 0, 0)):
        t0 = time.perf_counter()
        try:
            sched = layer.scheduler(method, inflight, lanes=lanes)
            setup_ms = (time.perf_counter() - t0) * 1e3
            sched.issue(0, 0).synchronize(60)  # warm-up (graph upload, lazy init)
        except Exception as e:  # noqa: BLE001 - report, keep benchmarking
            out[f"{method}_lanes{lanes}_error"] = repr(e)[:300]
            print(f"  R1 {weight_dtype} {method}: {e!r}", flush=True)
            continue
        host, dev_ms = [], []
        for i in range(reps if method in ("batch", "graph") else 2):
            layer.dst[0].fill_(0)
            torch.cuda.synchronize()
            with torch.cuda.stream(sched.stream):
                spin(0.15 if method in ("per_op", "torch") else 0.02)  # copies start after issue returns
            t0 = time.perf_counter()
            h = sched.issue(0, 0)
            host.append((time.perf_counter() - t0) * 1e6)
            h.synchronize(60)
            dev_ms.append(h.elapsed_ms())
        key = method + (f"_inflight{inflight}" if inflight else "") + (f"_lanes{sched.lanes}" if method == "graph" else "")
        ms = statistics.median(dev_ms)
        out[key] = {"issue_us": statistics.median(host), "issue_us_min": min(host), "copy_ms": ms,
                    "GBps": 2 * layer.plan.total_bytes / ms / 1e6, "exact": layer.check(), "setup_ms": setup_ms}
        sched.close()
        print(f"  R1 {weight_dtype} {key}: {len(layer.plan.ops)} ops, issue {out[key]['issue_us']:.0f} us, "
              f"copy {ms:.2f} ms = {out[key]['GBps']:.0f} GB/s, exact {out[key]['exact']}, setup {setup_ms:.0f} ms",
              flush=True)
    del layer
    torch.cuda.empty_cache()
    return out


def gemm_overlap(dev, reps: int) -> list[dict]:
    """bf16 GEMM loop alone vs with a concurrent R1 fp8 layer pull, sliced/unsliced, with pacing variants."""
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    layer = R1Layer(dev, "fp8")
    compute = torch.cuda.current_stream(dev)

    def gemms(n):
        for _ in range(n):
            torch.matmul(a, b, out=c)

    for _ in range(3):
        gemms(5)
    torch.cuda.synchronize()

    def run(n_gemm, sched=None, delay_after=None):
        """GEMMs are queued first and the copies after them (both behind one spin), so a host that
        blocks inside issue() cannot skew the overlap; the copy starts with the GEMMs (or at `mid`)."""
        g0, g1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin(5e-3)
        g0.record(compute)
        gemms(delay_after or 0)
        mid = torch.cuda.Event()
        mid.record(compute)
        gemms(n_gemm - (delay_after or 0))
        g1.record(compute)
        h = sched.issue(0, 0, after=mid) if sched is not None else None
        g1.synchronize()
        if h is not None:
            h.synchronize(60)
        gemm_ms = g0.elapsed_time(g1)
        copy_ms = h.elapsed_ms() if h is not None else 0.0
        end_ms = g0.elapsed_time(h.end) if h is not None else gemm_ms
        return gemm_ms, copy_ms, max(gemm_ms, end_ms)

    def med(fn):
        vals = [fn() for _ in range(reps)]
        return tuple(statistics.median(v[i] for v in vals) for i in range(3))

    one_gemm = med(lambda: run(1))[0]
    copy_alone = {}
    for method in ("batch", "graph"):
        sched = layer.scheduler(method)
        sched.issue(0, 0).synchronize(60)
        copy_alone[method] = med(lambda: run(0, sched))[1]
        sched.close()
    n_gemm = max(2, round(min(copy_alone.values()) / one_gemm))
    gemm_alone = med(lambda: run(n_gemm))[0]
    rows = [{"variant": "gemm alone", "gemms": n_gemm, "gemm_ms": gemm_alone, "copy_ms": 0.0, "makespan_ms": gemm_alone}]
    unsliced = layer.replan(False)
    for name, plan, method, inflight, delay in (
            ("copy alone (sliced 2 MiB, batch)", layer.plan, "batch", 0, None),
            ("copy alone (sliced 2 MiB, graph)", layer.plan, "graph", 0, None),
            ("unsliced, batch", unsliced, "batch", 0, None),
            ("sliced 2 MiB, batch", layer.plan, "batch", 0, None),
            ("sliced 2 MiB, graph (3 lanes)", layer.plan, "graph", 0, None),
            ("sliced, batch, pacing 256 in flight", layer.plan, "batch", 256, None),
            ("sliced, batch, pacing 64 in flight", layer.plan, "batch", 64, None),
            ("sliced, batch, pacing 16 in flight", layer.plan, "batch", 16, None),
            ("sliced, graph, delayed start (after half the GEMMs)", layer.plan, "graph", 0, n_gemm // 2)):
        sched = layer.scheduler(method, inflight, plan=plan)
        sched.issue(0, 0).synchronize(60)
        alone = name.startswith("copy alone")
        g, cp, mk = med(lambda: run(0 if alone else n_gemm, sched, None if alone else delay))
        ok = layer.check()
        sched.close()
        base = copy_alone[method]
        rows.append({"variant": name, "gemms": 0 if alone else n_gemm, "gemm_ms": g, "copy_ms": cp, "makespan_ms": mk,
                     "gemm_slowdown": (g / gemm_alone) if not alone else None,
                     "copy_slowdown": cp / base, "exposed_copy_ms": mk - gemm_alone if not alone else cp,
                     "exact": ok})
        print(f"  {name}: gemm {g:.2f} ms (alone {gemm_alone:.2f}), copy {cp:.2f} ms, makespan {mk:.2f}", flush=True)
    del layer
    torch.cuda.empty_cache()
    return rows


def markdown(res: dict) -> str:
    b = res["bulk"] or {"bytes": 0, "torch_GBps": float("nan"), "batch1_GBps": float("nan")}
    lines = [f"# Copy benchmark ({res['device']}, {res['date']})", "",
             f"Bulk D2D {b['bytes'] // MiB} MiB: torch copy_ {b['torch_GBps']:.0f} GB/s, one-op cuMemcpyBatchAsync "
             f"{b['batch1_GBps']:.0f} GB/s (r+w).", "", *[f"ERROR in {k}: {v}" for k, v in res.get("errors", {}).items()], "",
             "## Sliced 1 GiB copy on one stream: r+w GB/s (fraction of bulk) and host issue us", "",
             "| slice | ops | per_op | batch | batch (cuda.bindings lists) | graph 1 lane | graph 4 lanes |",
             "|---|---|---|---|---|---|---|"]

    def cell(r, k):
        if f"{k}_GBps" not in r:
            return r.get(f"{k}_error", "n/a")[:40]
        return (f"{r[f'{k}_GBps']:.0f} ({r[f'{k}_frac_bulk']:.2f}), {r[f'{k}_issue_us']:.0f} us"
                + ("" if r[f"{k}_exact"] else " NOT EXACT"))

    for r in res["sliced"]:
        lines.append(f"| {r['slice_bytes'] // KiB} KiB | {r['ops']} | "
                     + " | ".join(cell(r, k) for k in ("per_op", "batch", "batch_pylist", "graph1", "graph4")) + " |")
    lines += ["", "## Host time to issue one DeepSeek-R1 layer's plan (G=4, rank 0: 3 sources, 2 MiB slices)", "",
              "| dtype | ops | GB | method | issue us (median) | issue us (min) | copy ms | r+w GB/s | exact | setup ms |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["issue"]:
        for k, v in r.items():
            if isinstance(v, dict) and "issue_us" in v:
                lines.append(f"| {r['dtype']} | {r['ops']} | {r['bytes'] / 1e9:.2f} | {k} | {v['issue_us']:.0f} | "
                             f"{v['issue_us_min']:.0f} | {v['copy_ms']:.2f} | {v['GBps']:.0f} | {v['exact']} | {v['setup_ms']:.0f} |")
    lines += ["", "## bf16 8192^3 GEMM loop with a concurrent R1 fp8 layer pull (copy stream)", "",
              "| variant | GEMMs | GEMM ms | GEMM slowdown | copy ms | copy slowdown | makespan ms | exposed copy ms |",
              "|---|---|---|---|---|---|---|---|"]
    for r in res["gemm_overlap"]:
        gs = r.get("gemm_slowdown")
        cs = r.get("copy_slowdown")
        lines.append(f"| {r['variant']} | {r['gemms']} | {r['gemm_ms']:.2f} | {'' if gs is None else f'{gs:.3f}'} | "
                     f"{r['copy_ms']:.2f} | {'' if cs is None else f'{cs:.2f}'} | {r['makespan_ms']:.2f} | "
                     f"{r.get('exposed_copy_ms', 0.0):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for copy_bench.json and copy_bench.md")
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_copy.py needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    reps = 3 if args.quick else args.reps
    total = (256 * MiB) if args.quick else GiB
    res = {"device": torch.cuda.get_device_name(dev), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "torch": torch.__version__, "cuda": torch.version.cuda}
    args.out.mkdir(parents=True, exist_ok=True)

    def section(key, fn):
        print(f"{key} ...", flush=True)
        try:
            res[key] = fn()
        except Exception as e:  # noqa: BLE001 - keep what was measured, say what failed
            import traceback
            traceback.print_exc()
            res.setdefault("errors", {})[key] = repr(e)[:500]
            res[key] = [] if key != "bulk" else {}
        (args.out / "copy_bench.json").write_text(json.dumps(res, indent=1, default=str))  # partial results survive

    section("bulk", lambda: bulk(dev, total, reps))
    print(f"  {res['bulk']}", flush=True)
    sizes = [256 * KiB, 512 * KiB, MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB]
    section("sliced", lambda: sliced(dev, total, sizes, reps, res["bulk"].get("torch_GBps", 4000.0)))
    section("issue", lambda: [issue_time(dev, wd, max(reps, 5)) for wd in (("fp8",) if args.quick else ("fp8", "bf16"))])
    section("gemm_overlap", lambda: gemm_overlap(dev, reps))
    md = markdown(res)
    (args.out / "copy_bench.md").write_text(md)
    print(md)
    return exit_code(res, name="bench_copy")  # a copy that is not bit-exact, or a section that failed


if __name__ == "__main__":
    raise SystemExit(main())
