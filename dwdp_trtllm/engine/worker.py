"""One rank of a benchmark run: build the model for a mode, serve the rank's queue, report a RankResult.

Runs inside a process whose default torch.distributed group (gloo) spans all ranks; the launcher
(launcher.py) or torchrun/mpirun sets that up. Modes:
- reference: all experts local, no communication (the truth the other modes are checked against)
- dep:       experts partitioned over all ranks, all-to-all per MoE layer, ranks in lockstep
- dwdp:      experts partitioned over DWDP groups, peers' experts prefetched, ranks run free
"""
from __future__ import annotations

import resource
import time
from typing import Callable

import torch
import torch.distributed as dist

from ..spec.config import BenchConfig
from .records import IterationRecord, RankResult, Request, Segment
from .timing import PhaseTimer

_DTYPE = {"float32": torch.float32, "bf16": torch.bfloat16}


def rank_device(rank: int, run_device: str) -> torch.device:
    if run_device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("run.device is cuda but torch sees no CUDA device (use --device cpu)")
    return torch.device("cuda", rank % torch.cuda.device_count())


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def request_token_ids(vocab: int, seed: int, request_id: int, isl: int) -> torch.Tensor:
    """The isl token ids of request `request_id` in a run seeded with model.seed `seed` (every mode, every rank)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + request_id)
    return torch.randint(0, vocab, (isl,), generator=g)


class _Tokens:
    """Deterministic token ids of each request (seeded by its id), drawn whole on its first chunk."""

    def __init__(self, vocab: int, seed: int, requests: list[Request]):
        self.vocab, self.seed = vocab, seed
        self.isl = {r.request_id: r.isl for r in requests}
        self.cache: dict[int, torch.Tensor] = {}

    def ids(self, seg: Segment) -> torch.Tensor:
        if seg.request_id < 0:  # DEP's dummy one-token forward
            return torch.zeros(seg.length, dtype=torch.int64)
        if seg.request_id not in self.cache:
            self.cache[seg.request_id] = request_token_ids(self.vocab, self.seed, seg.request_id, self.isl[seg.request_id])
        ids = self.cache[seg.request_id][seg.start: seg.start + seg.length]
        if seg.is_last:
            del self.cache[seg.request_id]
        return ids


def _external_bytes(backend) -> int:
    """Device bytes a backend allocated outside torch's caching allocator."""
    rt = getattr(backend, "rt", None)
    if rt is not None:
        comp = rt.composite.allocated_bytes if rt.composite is not None else 0
        return rt.local_bytes + comp
    ipc = getattr(getattr(backend, "a2a", None), "ipc", None)
    return ipc.capacity if ipc is not None else 0


def load_weights(cfg: BenchConfig, spec, device: torch.device):
    """(dense weights on `device`, ExpertFn): from cfg.model.checkpoint (HF safetensors) when set, else seeded.

    Seeded weights on CUDA are drawn with the device generator (seconds instead of minutes at DeepSeek
    width); every rank of every mode of a run uses the same setting, so the modes see identical weights."""
    from .fp8_linear import FP8, fp8_linear_on
    from .weights import dense_dtype, init_dense_weights, seeded_expert_fn

    dtype = _DTYPE[cfg.model.dtype]
    if cfg.model.checkpoint:
        from .loader import load_checkpoint
        # FP8 linear layers: the checkpoint's own codes and _scale_inv, kept as they are (MoETransformer takes them)
        dense, loader = load_checkpoint(cfg.model.checkpoint, spec, dtype=torch.float32, device="cpu",
                                        keep_fp8=fp8_linear_on(cfg))
        # experts stay float32 on the CPU until expert_tensors has cast them to weight_dtype
        return {n: t.to(device) if t.dtype == FP8 or n.endswith("_scale_inv") else t.to(device, dense_dtype(n, dtype))
                for n, t in dense.items()}, loader
    on_device = device.type == "cuda"
    return (init_dense_weights(spec, cfg.model.seed, dtype, device, on_device=on_device),
            seeded_expert_fn(spec, cfg.model.seed, device, on_device=on_device))


def build_backend(cfg: BenchConfig, mode: str, spec, *, rank: int, world: int, device: torch.device, tag: str,
                  expert_fn=None):
    """(ExpertBackend, weight bytes held for experts, prefetch slot bytes, extra info).

    expert_fn(layer, e) -> (w13, w2) float weights (weights.ExpertFn); default: load_weights(cfg, ...)."""
    from .local_experts import LocalExperts
    from .weights import expert_tensors, stack_experts

    if expert_fn is None:
        expert_fn = load_weights(cfg, spec, device)[1]
    wdt = cfg.dwdp.weight_dtype
    gemm = cfg.dwdp.gemm
    if gemm == "composite_view" and mode != "dwdp":
        gemm = "multi_buffer"  # the composite view is DWDP's (local + slot); other modes hold one buffer

    def layer_tensors(layer: int, experts) -> dict[str, torch.Tensor]:
        return stack_experts(spec, layer, experts, expert_fn, wdt, device)

    if mode == "reference":
        weights = [layer_tensors(layer, range(spec.num_experts)) for layer in spec.moe_layer_ids]
        nbytes = sum(_tensor_bytes(w.values()) for w in weights)
        return LocalExperts(spec, weights, gemm=gemm), nbytes, 0, {}
    if mode == "dep":
        from .dep import DepExperts, expert_range
        weights = [layer_tensors(layer, range(*expert_range(spec.num_experts, rank, world))) for layer in spec.moe_layer_ids]
        group = dist.group.WORLD
        if device.type == "cuda" and torch.cuda.device_count() >= world:
            group = dist.new_group(backend="nccl")
        backend = DepExperts(group=group, ep_rank=rank, ep_size=world, num_experts=spec.num_experts, weights=weights,
                             device=device, gemm=gemm, tag=f"{tag}_dep")
        return backend, sum(_tensor_bytes(w.values()) for w in weights), 0, {"dep_a2a": backend.a2a.kind}
    if mode == "dwdp":
        from ..core.runtime import DwdpRuntime
        from .dwdp import DwdpExperts
        G = cfg.dwdp.dwdp_size
        groups = [dist.new_group(list(range(g * G, (g + 1) * G)), backend="gloo") for g in range(world // G)]
        rt = DwdpRuntime(cfg.dwdp, spec, group=groups[rank // G], dwdp_rank=rank % G, device=device, tag=f"{tag}_g{rank // G}",
                         timeout_s=cfg.run.timeout_s)
        for m, layer in enumerate(spec.moe_layer_ids):
            for i, e in enumerate(rt.local_ids):  # expert by expert: no stacked copy of the layer
                for name, t in expert_tensors(spec, *expert_fn(layer, e), wdt).items():
                    rt.local_tensor(m, name)[i].copy_(t)
        rt.open()
        return DwdpExperts(rt, gemm=gemm), rt.local_bytes, rt.slot_bytes, {"transport": rt.transport.kind}
    raise ValueError(f"unknown mode {mode!r}: expected reference, dep or dwdp")


def _allocator_counts(device: torch.device) -> dict[str, int]:
    """torch's caching-allocator event counters (cumulative) for the device."""
    stats = torch.cuda.memory_stats(device)
    return {"device_allocs": int(stats.get("num_device_alloc", 0)), "alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0))}


def run_rank(cfg: BenchConfig, mode: str, requests: list[Request], *, rank: int, world: int, tag: str,
             progress: Callable[[int, int], None] | None = None, collect_outputs: bool = False,
             fail_at_iteration: int | None = None, popularity_LE=None,
             on_iteration: Callable[[int], None] | None = None) -> RankResult:
    """Serve `requests` on this rank in `mode`; collective with the other ranks of the default group.

    collect_outputs: keep every request's final hidden states (CPU float32, [isl, H]) in
    RankResult.extra["hidden"] (tests compare modes with them). popularity_LE: workload.routing_skew's popularity
    per MoE layer, computed once in the parent (engine/launcher.py skew_popularity); needed when the skew is on.
    on_iteration(it): called as iteration `it` starts (engine/rank_entry.py: the heartbeat's place).
    """
    from .kv_cache import KVCache
    from .model import MoETransformer
    from ..spec.batching import RankScheduler
    device = rank_device(rank, cfg.run.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        torch.set_num_threads(cfg.run.threads_per_rank)
    spec = cfg.model.spec()
    dtype = _DTYPE[cfg.model.dtype]
    dense, expert_fn = load_weights(cfg, spec, device)
    backend, expert_bytes, slot_bytes, extra = build_backend(cfg, mode, spec, rank=rank, world=world, device=device, tag=tag,
                                                             expert_fn=expert_fn)
    from .fp8_linear import fp8_linear_on
    model = MoETransformer(spec, dense, backend, device=device, dtype=dtype, fp8_linear=fp8_linear_on(cfg))
    del dense  # the model holds its own (FP8 linears: codes + scales instead of these)
    model.record_routing()  # per-expert routed pairs of each iteration, for `dwdp bench --floor`
    skew = cfg.workload.routing_skew
    if not skew.off:  # every rank and mode gets the parent's one table: the same routing in DEP and DWDP
        if popularity_LE is None:
            raise ValueError("workload.routing_skew is on: run_rank takes the popularity table the parent computed "
                             "(engine/launcher.py skew_popularity); a rank reads no counts file")
        model.set_routing_skew(popularity_LE, seed=skew.seed)
    model.warm_up_attention(cfg.workload.max_num_tokens)  # per-shape attention plans, before any timing
    timer = PhaseTimer(device)
    if hasattr(backend, "set_timer"):
        backend.set_timer(timer)
    elif hasattr(backend, "timer"):
        backend.timer = timer
    sched = RankScheduler(requests, cfg.workload.max_num_tokens)
    kv = KVCache(spec.num_layers)
    tokens = _Tokens(spec.vocab_size, cfg.model.seed, requests)
    lockstep = mode == "dep"
    iterations: list[IterationRecord] = []
    first_token: dict[int, float] = {}
    done_requests = 0
    outputs: dict[int, list[torch.Tensor]] = {}
    sync_counts, sync_seen = {"warmup": 0, "steady": 0}, 0
    weights_bytes = model.dense_bytes() + expert_bytes
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        alloc_after_warmup = _allocator_counts(device)  # replaced when the warm-up iterations end
    dist.barrier()
    t0 = time.perf_counter()
    it = 0
    try:
        while True:
            segs = sched.next_batch(time.perf_counter() - t0)
            if lockstep:
                nxt = sched.next_arrival_s()
                state = torch.tensor([0.0 if segs is None else 1.0, 1.0 if segs else 0.0,
                                      float("inf") if nxt is None else nxt], dtype=torch.float64)
                states = [torch.empty_like(state) for _ in range(world)]
                dist.all_gather(states, state)
                alive = any(s[0] > 0 for s in states)
                anyone_working = any(s[1] > 0 for s in states)
                if not alive:
                    break
                if not anyone_working:
                    wake = min(s[2].item() for s in states)
                    time.sleep(max(0.0, min(wake - (time.perf_counter() - t0), 1.0)))
                    continue
                if not segs:  # peers have work: a dummy one-token forward keeps the collectives matched
                    segs = [Segment(request_id=-1, start=0, length=1, is_last=True)]
            else:
                if segs is None:
                    break
                if not segs:
                    nxt = sched.next_arrival_s()
                    time.sleep(max(0.0, min((nxt or 0.0) - (time.perf_counter() - t0), 1.0)))
                    continue
            if on_iteration is not None:
                on_iteration(it)
            if fail_at_iteration == it:
                raise RuntimeError(f"injected failure on rank {rank} at iteration {it} (mode {mode})")
            ids_T = torch.cat([tokens.ids(s) for s in segs]).to(device)
            timer.start()
            t_s = time.perf_counter()
            hidden_TH = model.forward(ids_T, segs, kv, timer)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t_e = time.perf_counter()
            prefetcher = getattr(getattr(backend, "rt", None), "prefetcher", None)
            if prefetcher is not None:
                prefetcher.report_copies()
            real = [s for s in segs if s.request_id >= 0]
            if collect_outputs:
                rows = hidden_TH.float().cpu().split([s.length for s in segs])
                for s, r in zip(segs, rows):
                    if s.request_id >= 0:
                        outputs.setdefault(s.request_id, []).append(r)
            for s in real:  # the model frees a request's KV cache after its last chunk
                if s.is_last:
                    first_token[s.request_id] = t_e
                    done_requests += 1
            if device.type == "cuda" and it + 1 == cfg.run.warmup_iters:
                alloc_after_warmup = _allocator_counts(device)
            if getattr(backend, "check_sync", False):  # host syncs inside the DWDP layer, by iteration kind
                key = "warmup" if it < cfg.run.warmup_iters else "steady"
                sync_counts[key] += backend.host_syncs - sync_seen
                sync_seen = backend.host_syncs
            iterations.append(IterationRecord(rank=rank, iteration=it, t_start=t_s, t_end=t_e,
                                              num_tokens=sum(s.length for s in real), segments=real,
                                              warmup=it < cfg.run.warmup_iters, phases=timer.collect(),
                                              expert_counts=model.routing_counts()))
            it += 1
            if progress is not None and real:
                progress(done_requests, len(requests))
    except BaseException:
        rt = getattr(backend, "rt", None)
        if rt is not None:
            rt.abort()  # local release only: a collective here would hang on the failing path
        if hasattr(backend, "a2a"):
            backend.a2a.close()
        raise
    rt = getattr(backend, "rt", None)
    copied = rt.prefetcher.copied_bytes if rt is not None and rt.prefetcher is not None else 0
    external = _external_bytes(backend) if device.type == "cuda" else 0  # before close() releases them
    if rt is not None:
        rt.close()
    if hasattr(backend, "a2a"):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()  # no peer still writes into our DEP receive buffer
        backend.a2a.close()
    if device.type == "cuda":
        # torch's peak misses what cudaMalloc/cuMemCreate handed out directly (exported expert buffers,
        # VMM slot runs, DEP's IPC receive buffers): add those
        peak = torch.cuda.max_memory_allocated(device) + external
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    memory = {"weights": weights_bytes, "prefetch_slots": slot_bytes,
              "activations": max(0, peak - weights_bytes - slot_bytes), "peak_total": peak}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if device.type == "cuda":
        # cudaMalloc calls and allocator retries (a retry frees the cache and syncs the device) after warm-up:
        # non-zero means measured iterations paid for allocation, e.g. a rank near the memory limit
        end = _allocator_counts(device)
        extra["allocator_after_warmup"] = {k: end[k] - alloc_after_warmup[k] for k in end}
    if getattr(backend, "check_sync", False):
        extra["host_syncs_in_dwdp_layer"] = sync_counts
        extra["host_sync_sites"] = backend.sync_sites
    if collect_outputs:
        extra["hidden"] = {rid: torch.cat(parts) for rid, parts in outputs.items()}
    return RankResult(rank=rank, mode=mode, device=name, t0=t0, requests=requests, iterations=iterations,
                      first_token_s=first_token, memory_bytes=memory, copy_bytes=copied, extra=extra)
