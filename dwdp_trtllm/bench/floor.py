"""The floor of the engine's work: what its kernels take for the same per-layer work, each timed alone, on this
machine. Stock kernels (torch's GEMMs, cuDNN / flash attention) where one does the work, called as the engine calls
them; the engine's own one-pass kernels for the attention passes no stock kernel takes over (below). Historically
called the "stock-kernel floor" (`dwdp bench --floor`'s messages, docs/history/benchmarks-2026-12.md section 7).

Files: the kernels as closures (bench/floor_kernels.py), their timer and one iteration's floor (bench/floor_timer.py:
FloorTimer, Batch; imported from here too), a bench point's floor report (here: floor_report, over_floor), the
floor under sustained load (bench/floor_sustained.py).

`dwdp bench --floor` times it for the measured iterations of every rank and mode and reports the engine's
efficiency (floor / measured) per phase beside the table (docs/BENCHMARKS.md, "Engine vs floor").

What one iteration's floor counts (its batch: the segments it ran, with their cached prefixes, and the
routing it produced per MoE layer), each timed alone with CUDA events (median of `reps` after warm-up):
- attention, per layer: every projection GEMM at the model dtype (MLA: q_a, q_b, kv_a, kv_b over prefix +
  chunk keys, o; GQA: q, k, v, o), or, when the run's linear layers are FP8 (model.fp8_linear), the same GEMMs in
  the same FP8 block-scale recipe the engine runs (torch._scaled_mm, 1x128 activation / 128x128 weight scales,
  outer-dim-major; rows padded to 16 and out-features to 128 as engine/fp8_linear.py pads them) and the attention core over the actual sequence mix with the fastest stock
  kernel of this torch, through the engine's calls (cuDNN SDPA per segment via engine/attention_cuda.py, v at its
  own head dim; the chunks with a cached prefix all one way, either all as the causal chunk + flash over the
  prefix + merge or all as one causal call over prefix + chunk, whichever is faster for the whole batch: the engine
  chooses per chunk (prefix_as_causal), so on a batch whose chunks favour different ways the engine can beat
  this part of the floor; flash varlen with v padded to the qk head dim where it is faster or cuDNN is not usable;
  SDPA per segment on the CPU);
- routed experts, per MoE layer: the grouped GEMMs of that layer's routing (gate|up, then down) on one
  [E, N, K] buffer: torch._grouped_mm for BF16, torch._scaled_grouped_mm (rowwise scales) for FP8; the rows
  are those the rank's expert phase computes (DEP: the pairs its experts received from every rank);
- other: the dense MLP GEMMs of the first_k_dense layers, and per MoE layer the router GEMM and the shared
  experts' GEMMs (dense MLP and shared experts FP8 with FP8 linears, gate|up as one GEMM as the engine runs it;
  the router stays at the model dtype).
- attention passes, per layer: the memory passes between the attention's stock kernels that none of them takes
  over (attention_passes_ms): RoPE of q's rope part and of the rope key (GQA: of q and k), in place; MLA's key
  [S, N, Dn + R] assembled from kv_b's nope part and the rope key broadcast over heads (cuDNN's SDPA reads one K
  tensor); with FP8 linears the 1x128 quantisation of the attention output for o_proj (no stock attention kernel
  writes block-scaled FP8). No stock kernel does any of these in one pass: they run the engine's one-pass kernels
  (rope_cuda, mla_cuda, quant_cuda; about DRAM bandwidth). floor_report's attention_proj is the attention floor
  less its core (projections + passes); attention_passes gives the passes apart.
Not counted (taken as free, i.e. fusable into a neighbour by a production stack): norms and the quantisation of a
normed input (fused into the norm), SwiGLU, top-k, the sort / gather / combine of routed rows (which the engine
times with the routed experts where one rank runs the whole op: engine/dwdp.py, engine/dep.py), the other activation
quantisations, embedding. The floor is therefore what these kernels take alone for the counted work: a reference,
not a strict lower bound. The engine can come in under it where it runs other kernels (FP8 routed experts: its
CUTLASS blockwise op, not torch._scaled_grouped_mm), where kernels timed alone on random data run slower than inside
the engine (docs/history/benchmarks-2026-12.md section 7: routed experts at 0.85-0.95 of the floor), and in the attention core of a
batch whose prefixed chunks favour different ways (above); nor does it bound other implementations (other kernels,
fused passes).

Clock: kernels timed alone run at the card's boost clock, the engine's back-to-back forwards at what its power limit
allows (docs/history/benchmarks-2026-12.md section 12). floor_report samples the SM clock and power while the floor is timed
(bench/gpu_clocks.py; the burst floor's cut to its timed calls, FloorTimer.windows; the engine's during its measured
iterations, by the caller), and with `--floor-sustained`
also times the floor under sustained load: these same kernels (every `*_ms` of FloorTimer times a `*_fn` closure) replayed
back to back (bench/floor_sustained.py). over_floor is every engine / floor ratio, burst or sustained.

Shape legend: T tokens of the iteration, H hidden, E experts, I intermediate, A routed rows.
"""
from __future__ import annotations

import statistics

import torch

from ..spec.models import ModelSpec
from .floor_timer import Batch, FloorTimer  # noqa: F401 - Batch and FloorTimer are imported from here too
from .metrics import phase_ms


# ---- a bench point's floor ------------------------------------------------------------------------------
def _memo(fn):
    cache: dict = {}

    def wrapped(*args):
        if args not in cache:
            cache[args] = fn(*args)
        return cache[args]
    return wrapped


def rank_batches(by_mode: dict, spec: ModelSpec) -> dict[str, list[tuple[int, object, Batch]]]:
    """{mode: [(rank, IterationRecord, Batch)]} for the measured iterations that processed tokens.

    DEP rank r computes, at iteration i, the pairs every rank routed to its experts (iterations are in lockstep,
    dummy forwards included, so index i is the same layer step on every rank); DWDP and reference ranks compute
    their own pairs over all experts."""
    from ..engine.dep import expert_range

    out: dict[str, list] = {}
    for mode, results in by_mode.items():
        rows = []
        world = len(results)
        for r in results:
            for i, it in enumerate(r.iterations):
                if it.warmup or it.num_tokens == 0 or it.expert_counts is None:
                    continue
                if mode == "dep":
                    lo, hi = expert_range(spec.num_experts, r.rank, world)
                    per_layer = []
                    for m in range(spec.num_moe_layers):
                        tot = [0] * (hi - lo)
                        for peer in results:
                            c = peer.iterations[i].expert_counts if i < len(peer.iterations) else None
                            if c is not None:
                                tot = [a + b for a, b in zip(tot, c[m][lo:hi])]
                        per_layer.append(tuple(tot))
                else:
                    per_layer = [tuple(c) for c in it.expert_counts]
                segs = tuple((s.start, s.length) for s in it.segments)
                rows.append((r.rank, it, Batch(segs, tuple(per_layer))))
        out[mode] = rows
    return out


#: phases measured_ms also carries: the rest of the wall, over the same iterations (perf/floor_points.py reads them)
COMM_PHASES = ("all_to_all", "sync_wait", "prefetch_wait")


def _measured(it) -> dict[str, float]:
    """The engine's ms of one iteration (metrics.phase_ms), the wall as "total"."""
    d = phase_ms(it)
    return {**d, "total": d["wall"]}


#: the phases a floor is given for (ms per iteration), "total" the iteration
FLOOR_KEYS = ("attention", "expert_gemm", "other", "total")


def over_floor(measured: dict, floor: dict, keys=FLOOR_KEYS) -> dict:
    """{phase: measured / floor} (None where the floor is 0): the engine over a floor, burst or sustained; the one
    place this ratio is computed for `dwdp bench --floor` and scripts/profile_engine.py."""
    return {k: (measured[k] / floor[k] if floor.get(k) and k in measured else None) for k in keys}


class _NoSampler:
    """Samples nothing (a CPU floor): stats() is None."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def stats(self, t0=None, t1=None, windows=None) -> None:
        return None


def _sampler(device: torch.device):
    """A GpuSampler of the floor's device (cuda), else _NoSampler."""
    from .gpu_clocks import GpuSampler
    return GpuSampler(device.index or 0) if device.type == "cuda" else _NoSampler()


def floor_report(cfg, by_mode: dict, *, sustained=None, engine_clocks: dict | None = None,
                 engine_windows: dict | None = None) -> dict:
    """{mode: {"floor_ms", "measured_ms", "efficiency"}}: per-iteration means over the measured iterations
    that processed tokens of every rank (phases: attention, expert_gemm, other, total = iteration wall; measured_ms
    also all_to_all, sync_wait, prefetch_wait over the same iterations); efficiency = floor / measured.
    Also "method" and "device". Runs in this process on the run's device (cuda:0 or cpu).

    sustained (floor_sustained.SustainedSettings): also the floor under sustained load per mode, "sustained":
    {"floor_ms", "measured_over_floor", "passes_timed", "warmup_s", "warmup_end", ...}, timed at least as long as
    the mode's measured iterations ran, in min_timed to max_timed passes (engine_windows[mode]: (t0, t1) on
    perf_counter). "clock" per mode (CUDA):
    {"floor_burst", "floor_sustained", "engine"}: gpu_clocks.clock_stats of the SM clock and power while each ran
    (floor_burst: the samples inside FloorTimer.windows, its timed calls, with how many fell inside; engine:
    engine_clocks[mode], sampled by the caller during the measured iterations)."""
    spec = cfg.model.spec()
    dtype = {"float32": torch.float32, "bf16": torch.bfloat16}[cfg.model.dtype]
    device = torch.device("cuda", 0) if cfg.run.device == "cuda" else torch.device("cpu")
    from ..engine.fp8_linear import fp8_linear_on
    timer = FloorTimer(spec, dtype, cfg.dwdp.weight_dtype, device, fp8_linear=fp8_linear_on(cfg))
    timer.gemm_ms = _memo(timer.gemm_ms)  # the same GEMM shape recurs in every iteration and layer
    timer.linear_ms = _memo(timer.linear_ms)
    timer.attention_core_ms = _memo(timer.attention_core_ms)
    timer.attention_passes_ms = _memo(timer.attention_passes_ms)
    timer.grouped_ms = _memo(timer.grouped_ms)
    out: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "linear_layers": "fp8 block scales" if timer.fp8_linear else "model dtype",
                 "method": "stock kernels timed alone per iteration's batch (bench/floor.py; docs/BENCHMARKS.md)"}
    try:
        for mode, rows in rank_batches(by_mode, spec).items():
            if not rows:
                continue
            keys = FLOOR_KEYS
            f_sum = dict.fromkeys(keys, 0.0)
            m_sum = dict.fromkeys((*keys, *COMM_PHASES), 0.0)
            flops = dict.fromkeys((*keys[:3], "attention_proj", "attention_core"), 0.0)
            f_core = f_passes = 0.0
            per_iter: dict[str, list[float]] = {k: [] for k in keys}
            burst = _sampler(device)  # the clock while the burst floor's kernels run
            first_window = len(timer.windows)  # this mode's timings (shapes timed for an earlier mode are memoised)
            with burst:
                for _rank, it, batch in rows:
                    f = timer.iteration_ms(batch)
                    f_core += f["attention_core"]
                    f_passes += f["attention_passes"]
                    m = _measured(it)
                    for k in keys:
                        if f[k] > 0:
                            per_iter[k].append(m[k] / f[k])
                    for k in keys:
                        f_sum[k] += f[k]
                    for k in m_sum:
                        m_sum[k] += m[k]
                    for k, v in timer.iteration_flops(batch).items():
                        flops[k] += v
            n = len(rows)
            floor = {k: v / n for k, v in f_sum.items()}
            floor["attention_core"] = f_core / n
            floor["attention_passes"] = f_passes / n  # part of attention_proj, shown apart
            # everything of the attention floor but the core: the projection GEMMs and the passes, which scale with
            # the same T and S; the planner prices it by the projections' FLOPs (perf/floor_calibration.py), so its
            # attention floor stays the one these ratios are measured against
            floor["attention_proj"] = floor["attention"] - floor["attention_core"]
            meas = {k: v / n for k, v in m_sum.items()}
            out[mode] = {"iterations": n, "floor_ms": floor, "measured_ms": meas,
                         "efficiency": {k: (floor[k] / meas[k] if meas[k] > 0 else None) for k in keys},
                         "measured_over_floor": over_floor(meas, floor),
                         # per iteration measured / floor, median over iterations: one-time costs inside a measured
                         # iteration (a kernel compiled there, say) move the mean ratio above, not this one
                         "measured_over_floor_median": {k: (statistics.median(v) if v else None)
                                                        for k, v in per_iter.items()},
                         # achieved rates: the floor's kernels and the engine, on the same FLOPs
                         "floor_tflops": {k: (flops[k] / n / (floor[k] * 1e-3) / 1e12 if floor[k] > 0 else None) for k in flops},
                         "engine_tflops": {k: (flops[k] / n / (meas[k] * 1e-3) / 1e12 if meas.get(k, 0) > 0 else None)
                                           for k in keys[:3]}}
            # the burst floor's clock: only samples inside its timed calls (not buffer fills, host work, gaps)
            clock = {"floor_burst": burst.stats(windows=timer.windows[first_window:]),
                     "engine": (engine_clocks or {}).get(mode)}
            if sustained is not None:
                out[mode]["sustained"], clock["floor_sustained"] = _sustained(timer, rows, meas, device, sustained,
                                                                             (engine_windows or {}).get(mode))
            if any(v is not None for v in clock.values()):  # sampled (CUDA): a CPU floor has no clock to show
                out[mode]["clock"] = clock
    finally:
        timer.release()
    return out


def _sustained(timer: FloorTimer, rows, meas: dict, device: torch.device, settings, window) -> tuple[dict, dict | None]:
    """floor_report's "sustained" entry of one mode and the clock while its timed passes ran."""
    from .floor_sustained import sustained_floor
    measure_s = (window[1] - window[0]) if window else None
    sampler = _sampler(device)
    with sampler:
        res = sustained_floor(timer, [batch for _rank, _it, batch in rows], measure_s, settings)
    win = res.pop("window")
    res["measured_over_floor"] = over_floor(meas, res["floor_ms"])
    res["engine_span_s"] = measure_s
    res["method"] = ("the floor's kernels replayed back to back, every measured iteration in order, after a warm-up "
                     "to a steady pass time (bench/floor_sustained.py)")
    return res, sampler.stats(*win)
