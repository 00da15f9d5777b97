"""Where the engine's time goes on one GPU: torch.profiler over one forward of the reference model
(all experts local, no communication), kernel table by CUDA time, plus the engine's own phase times.

    python3 scripts/profile_engine.py --out DIR [--isl 8192] [--tokens 16384] [--weight-dtype bf16|fp8]
        [--gemm merge|multi_buffer] [--layers 3] [--first-k-dense 1] [--mix] [--prefix-way auto|split|front]

--mix: the iteration a chunked-prefill bench step runs (ISL ratio 0.8 at max_num_tokens = --tokens): the tail
of a request with a cached prefix, a whole request, and the first chunk of a third (kept in the KV cache).
--prefix-way: how the engine attends a chunk with a cached prefix (engine/attention_cuda.py): auto (the engine's
choice per chunk, prefix_as_causal), split (causal chunk + flash over the prefix + merge) or front (one causal call
over prefix + chunk); the floor beside it (bench/floor.py) takes one way for all prefixed chunks, the faster for the
whole batch.

Writes DIR/profile_<tag>.txt (kernel table) and DIR/profile_<tag>.json (phase times per iteration). On CUDA also
where the GPU idles (the attention phase's excess over the floor): the wall of forwards without the phase
timer or the profiler, the host syncs of one forward (torch's sync debug mode), and one more profiled forward with
the phases marked and Python stacks on, whose chrome trace (DIR/trace_<tag>.json.gz) scripts/trace_gaps.py reads:
GPU idle per phase, host-late vs GPU-side, the largest gaps with the engine frame that launched the next kernel
(DIR/gaps_<tag>.txt; printed).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dwdp_trtllm.bench.gpu_clocks import GpuSampler, clock_text
from dwdp_trtllm.engine.model import build_reference_model
from dwdp_trtllm.engine.records import Segment
from dwdp_trtllm.engine.timing import PhaseTimer
from dwdp_trtllm.spec.models import get_model


def segments_for(tokens: int, isl: int) -> list[Segment]:
    out, rid, left = [], 0, tokens
    while left > 0:
        n = min(isl, left)
        out.append(Segment(rid, 0, n, True))
        rid, left = rid + 1, left - n
    return out


def mixed_segments(tokens: int, isl: int) -> tuple[list[Segment], list[Segment]]:
    """(prefill of the cached prefix, the measured iteration): request 0 continues after isl*5/8 cached tokens
    for its last isl*3/8, request 1 runs whole (0.9 isl), request 2 fills the rest as a first, non-final chunk."""
    p0, n0, n1 = isl * 5 // 8, isl * 3 // 8, isl * 9 // 10
    n2 = tokens - n0 - n1
    if n2 <= 0:
        raise SystemExit(f"--mix needs --tokens > {n0 + n1} at isl {isl}")
    return [Segment(0, 0, p0, False)], [Segment(0, p0, n0, True), Segment(1, 0, n1, True), Segment(2, 0, n2, False)]


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
    ap.add_argument("--mix", action="store_true", help="chunked-prefill iteration with a cached prefix (see above)")
    ap.add_argument("--prefix-way", choices=("auto", "split", "front"), default="auto",
                    help="how a chunk with a cached prefix is attended (see above)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{args.weight_dtype}_{args.gemm}_isl{args.isl}_t{args.tokens}{'_mix' if args.mix else ''}"
    if args.prefix_way != "auto":
        from dwdp_trtllm.engine import layers
        front = args.prefix_way == "front"
        layers.prefix_as_causal = lambda L, P, d, e, dev=0: P > 0 and front
        tag += f"_{args.prefix_way}"
    spec = get_model(args.preset, num_layers=args.layers, first_k_dense=args.first_k_dense)
    dev = torch.device(args.device)
    t0 = time.perf_counter()
    model = build_reference_model(spec, 0, torch.bfloat16, dev, gemm=args.gemm, weight_dtype=args.weight_dtype, on_device=True,
                                  fp8_linear=args.weight_dtype == "fp8")  # as `dwdp bench` (model.fp8_linear null)
    print(f"[{tag}] built in {time.perf_counter() - t0:.1f} s", flush=True)
    if dev.type != "cuda":
        print(f"[{tag}] {dev.type} run: a functional smoke of this script; its times are not performance results")
    g = torch.Generator(device=dev).manual_seed(1)
    ids = torch.randint(0, spec.vocab_size, (args.tokens,), device=dev, generator=g)
    from dwdp_trtllm.engine.kv_cache import KVCache
    kv = KVCache(spec.num_layers)
    pre, segs = mixed_segments(args.tokens, args.isl) if args.mix else ([], segments_for(args.tokens, args.isl))
    pre_ids = torch.randint(0, spec.vocab_size, (sum(s.length for s in pre),), device=dev, generator=g)

    def fill_prefix():  # the cached prefix of request 0 (untimed)
        if pre:
            model.forward(pre_ids, pre, kv)
        sync()

    def forward(timer=None):
        out = model.forward(ids, segs, kv, timer=timer)
        for s in segs:  # drop the chunk kept for a later iteration
            kv.free(s.request_id)
        return out

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    print(f"[{tag}] attention plans built: {model.warm_up_attention(args.tokens)}", flush=True)
    if dev.type == "cuda":  # does cuDNN's output follow q's [L, N, d] layout (then o_proj reads it without a copy)?
        from dwdp_trtllm.engine.attention_cuda import causal_chunk
        qd = torch.randn(512, spec.num_heads, 192, device=dev, dtype=torch.bfloat16)
        o = causal_chunk(qd, qd, qd[..., :128], 0.1)
        print(f"[{tag}] cuDNN out_LNe strides {o.stride()} contiguous {o.is_contiguous()}", flush=True)
    for _ in range(2):
        fill_prefix()
        forward()
    sync()
    timer = PhaseTimer(dev)
    phases = []
    walls = []
    model.record_routing(True)
    for _ in range(args.iters):
        fill_prefix()
        model.routing_counts()  # reset: count the measured iteration only
        timer.start()
        t = time.perf_counter()
        forward(timer)
        sync()
        walls.append(time.perf_counter() - t)
        agg: dict[str, float] = {}
        for name, layer, s, e in timer.collect():
            agg[name] = agg.get(name, 0.0) + (e - s) * 1e3
        agg.setdefault("expert_gemm", walls[-1] * 1e3 - sum(agg.values()))  # LocalExperts times no phase: the rest
        phases.append(agg)
    counts = model.routing_counts()
    model.record_routing(False)
    print(f"[{tag}] wall ms per iteration: {[round(w * 1e3, 1) for w in walls]}")
    print(f"[{tag}] phase ms per iteration (last): { {k: round(v, 1) for k, v in phases[-1].items()} }")
    floor = {}
    if dev.type == "cuda":  # the floor of this very batch (bench/floor.py: its kernels alone), beside the measurement
        from dwdp_trtllm.bench.floor import Batch, FloorTimer
        ft = FloorTimer(spec, torch.bfloat16, args.weight_dtype, dev, fp8_linear=args.weight_dtype == "fp8")
        with GpuClocks(dev) as clocks:  # kernels timed alone: the clock they run at, beside the engine's below
            floor = ft.iteration_ms(Batch(tuple((s.start, s.length) for s in segs), tuple(tuple(c) for c in counts)))
        ft.release()
        # only the samples inside its timed calls (FloorTimer.windows), as `dwdp bench --floor` reports them
        print(f"[{tag}] GPU while the floor was timed: {clocks.summary(ft.windows)}")
        from dwdp_trtllm.bench.floor import over_floor
        measured = {**phases[-1], "total": walls[-1] * 1e3}
        ratio = {k: round(v, 3) for k, v in over_floor(measured, floor, [k for k in floor if k in measured]).items()
                 if v is not None}
        print(f"[{tag}] floor ms: { {k: round(v, 1) for k, v in floor.items()} }  measured/floor: {ratio}")
    from torch.profiler import ProfilerActivity, profile
    fill_prefix()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        forward()
        sync()
    table = prof.key_averages().table(sort_by="cuda_time_total" if dev.type == "cuda" else "cpu_time_total", row_limit=60, max_name_column_width=90)
    shapes = prof.key_averages(group_by_input_shape=True).table(sort_by="cuda_time_total" if dev.type == "cuda" else "cpu_time_total", row_limit=40,
                                                                 max_name_column_width=60, max_shapes_column_width=80)
    (out / f"profile_{tag}.txt").write_text(table + "\n\n" + shapes)
    (out / f"profile_{tag}.json").write_text(json.dumps({"walls_ms": [w * 1e3 for w in walls], "phases_ms": phases, "floor_ms": floor,
                                                           "segments": [(s.start, s.length) for s in segs]}, indent=1))
    print(table[:6000])
    try:  # CPU: a smoke run of the code only
        idle_report(out, tag, fill_prefix, forward, sync, dev)
    except Exception as exc:  # noqa: BLE001 - the logs keep only "[tag]" lines: say it there, with where
        import traceback
        where = " < ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__)[-3:]))
        print(f"[{tag}] idle report failed: {type(exc).__name__}: {str(exc)[:200]} ({where})")
        raise


class GpuClocks(GpuSampler):
    """The SM clock and power of the run's GPU while the block runs (bench/gpu_clocks.GpuSampler: NVML, else
    nvidia-smi): whether kernels timed alone (the floor) and back to back (the engine) ran at the same clock."""

    def __init__(self, device: torch.device):
        super().__init__(device.index if device.index is not None else 0)

    def summary(self, windows=None) -> str:
        """gpu_clocks.clock_text of the samples (cut to `windows` where given), with their source."""
        return clock_text(self.stats(windows=windows))


class _Marks:
    """A timer for model.forward (and layers.PART_TIMER) that only marks each phase as a profiler range
    `phase:<name>:<layer>`."""

    def phase(self, name: str, layer: int = -1):
        return torch.profiler.record_function(f"phase:{name}:{layer}")


def idle_report(out: Path, tag: str, fill_prefix, forward, sync, dev: torch.device) -> None:
    """Where the GPU idles in a forward (module docstring): printed lines start with [tag]."""
    import gzip
    import sys
    import warnings
    from torch.profiler import ProfilerActivity, profile
    cuda = dev.type == "cuda"
    walls = []
    with GpuClocks(dev) as clocks:
        for _ in range(8):  # no phase timer, no profiler: the wall the kernels' sum compares with (8: > 1 s of clock samples)
            fill_prefix()
            t = time.perf_counter()
            forward()
            sync()
            walls.append((time.perf_counter() - t) * 1e3)
    print(f"[{tag}] wall ms per forward without timer or profiler: {[round(w, 1) for w in walls]} (compare: the GPU's "
          f"busy ms below); GPU during them: {clocks.summary()}")
    from dwdp_trtllm.engine import layers
    parts = PhaseTimer(dev)
    layers.PART_TIMER = parts  # MLA's parts timed with CUDA events (no profiler): attn.q / kv / core / o
    try:
        fill_prefix()
        parts.start()
        forward(parts)
        sync()
    finally:
        layers.PART_TIMER = None
    agg: dict[str, float] = {}
    for name, _layer, t0, t1 in parts.collect():
        if name.startswith("attn."):  # the parts only: forward(parts) also times the phases (attention, other, ...)
            agg[name] = agg.get(name, 0.0) + (t1 - t0) * 1e3
    print(f"[{tag}] attention parts ms per iteration (events, all layers): { {k: round(v, 2) for k, v in agg.items()} }")
    if cuda:
        fill_prefix()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                forward()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        sync()
        from dwdp_trtllm.engine.dwdp import is_sync_warning  # not torch's one-time "Synchronization debug mode" notice
        sites = [f"{Path(w.filename).name}:{w.lineno}" for w in caught if is_sync_warning(str(w.message))]
        print(f"[{tag}] host syncs in one forward (sync debug mode): {len(sites)} {sorted(set(sites))[:10]}")
    fill_prefix()
    layers.PART_TIMER = _Marks()  # the trace's ranges: the phases and MLA's parts
    try:
        with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda, with_stack=True) as prof:
            forward(_Marks())
            sync()
    finally:
        layers.PART_TIMER = None
    path = out / f"trace_{tag}.json"
    prof.export_chrome_trace(str(path))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trace_gaps import format_report, gap_report
    trace = json.loads(path.read_text())
    with gzip.open(str(path) + ".gz", "wt") as f:
        json.dump(trace, f)
    path.unlink()
    text = format_report(gap_report(trace, top=20), tag)
    (out / f"gaps_{tag}.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
