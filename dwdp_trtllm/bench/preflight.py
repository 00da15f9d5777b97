"""Pre-flight: everything about a run that can be checked before any rank starts, checked then (exit 2).

Two checks per sweep point, both before the first point runs:
- `check_warmup`: run.warmup_iters against the iterations the scheduler will run (all requests offline: exact;
  poisson arrivals: an upper bound), so a run that would measure nothing is refused naming the key.
- `check_resources`: the bytes the run takes against what the machine has free (host_resources.read_free):
  /dev/shm (the CPU transport puts every rank's local experts there, one file per rank, MoE layer and expert tensor:
  so also its free inodes, and that it is writable), host memory of all ranks together
  (cpu), device memory of the ranks on each GPU (cuda). The bytes are memory.py's (the model the deployment
  commands use), per mode (reference holds every expert, DEP 1/ranks of them, DWDP its local experts + prefetch
  slots); modes run one after another, so the largest mode decides. On the CPU also the attention scores the
  engine materialises there (`cpu_attention_bytes`: memory.py assumes flash attention, which the CPU takes only
  when v has the qk head dim; MLA's does not). Not counted:
  the Python/torch runtime of each process, CUDA context, NCCL's own /dev/shm and device buffers.
A refusal is one paragraph: what is short, the numbers (GB = 1e9 bytes, memory.py's unit), and the remedy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..deploy import host_resources
from ..spec.config import BenchConfig
from ..engine.records import Request
from ..byte_units import fmt_bytes
from ..deploy.host_resources import FreeResources
from ..deploy.memory import dwdp_ranks, rank_memory
from ..spec.schema import ConfigError


class PreflightError(ConfigError):
    """The run cannot fit this machine (or cannot measure anything); raised before any rank starts."""


# ---- what DWDP fetches ---------------------------------------------------------------------------------

def fetched_per_rank(cfg: BenchConfig) -> list[int]:
    """Experts each dwdp_rank fetches per MoE layer under the config's placement."""
    from ..core.placement import make_placement

    p = make_placement(cfg.dwdp, cfg.model.spec().num_experts)
    return [len(p.fetch_experts(r)) for r in range(p.dwdp_size)]


def nothing_to_fetch_note(points) -> str | None:
    """One line naming the points (SweepPoints or BenchConfigs) where DWDP runs but no rank fetches an expert
    (dwdp_size 1, the engine's default, or redundancy that makes every expert local): DWDP is then plain data
    parallelism and its numbers say nothing about prefetching. None when every DWDP point fetches. A note, not a
    refusal: a G=1 baseline beside G>1 points is a legitimate sweep."""
    from .report import point_label

    idle = [p for p in points if "dwdp" in getattr(p, "config", p).run.modes
            and max(fetched_per_rank(getattr(p, "config", p))) == 0]
    if not idle:
        return None
    cfg = getattr(idle[0], "config", idle[0])
    where = ("" if len(idle) == len(points) == 1 else
             f" at {'; '.join(point_label(getattr(p, 'values', {})) for p in idle)}")
    return (f"note: DWDP fetches no expert{where} (dwdp.dwdp_size {cfg.dwdp.dwdp_size}, redundant_experts "
            f"{cfg.dwdp.redundant_experts}: every rank holds every expert), so DWDP runs there as plain data "
            "parallelism with nothing to prefetch; set dwdp.dwdp_size >= 2 to measure DWDP's copies")


# ---- warm-up vs iterations ------------------------------------------------------------------------------

def sure_iterations(queue: list[Request], max_num_tokens: int) -> tuple[int, bool]:
    """(iterations the rank's scheduler (batching.py) is sure to run, exact?): ceil(tokens / max_num_tokens), since no
    iteration takes more. With every request at t=0 the count is exact (FCFS chunked prefill fills every iteration to
    max_num_tokens but the last); with later arrivals the run may take more (an iteration is short when it finishes a
    request whose successor has not arrived), how many more depends on the arrival times."""
    return -(-sum(r.isl for r in queue) // max_num_tokens), all(r.arrival_s <= 0 for r in queue)


def check_warmup(cfg: BenchConfig, queues: list[list[Request]], *, file: str | None = None) -> None:
    """Refuse a run.warmup_iters that may leave no measured iteration: at or past the iterations the busiest rank is
    sure to run (exact with every request at t=0; with arrivals (workload.arrival poisson) the run may take more, but
    only that many are certain before it starts). Every rank, DEP's in lock step too, runs at least that many."""
    if cfg.run.warmup_iters == 0:
        return
    counts = [sure_iterations(q, cfg.workload.max_num_tokens) for q in queues]
    bound = max(c for c, _ in counts)
    if cfg.run.warmup_iters >= bound:
        what = ("runs" if all(e for _, e in counts) else
                f"is sure to run only (workload.arrival {cfg.workload.arrival}: more depend on when requests arrive)")
        raise PreflightError(file, "run.warmup_iters",
                             f"{cfg.run.warmup_iters} warm-up iterations, but the busiest rank {what} {bound} "
                             f"iteration(s) of workload.max_num_tokens={cfg.workload.max_num_tokens} tokens: nothing "
                             f"might be measured. Set run.warmup_iters below {bound}, or give the workload more tokens "
                             "(workload.requests_per_rank, workload.isl) or a smaller workload.max_num_tokens")


# ---- resources ------------------------------------------------------------------------------------------

def largest_attention_chunk(queue: list[Request], max_num_tokens: int) -> tuple[int, int]:
    """(L, S) of the attention call with the largest L x S the rank's scheduler (batching.py, FCFS chunked
    prefill) makes: L query tokens of one chunk over its S = prefix + L keys. With every request at t=0 the packing
    is replayed exactly; with later arrivals only the first request's first chunk is certain (it starts an empty
    iteration), so that one is taken (a lower bound)."""
    queue = sorted(queue, key=lambda r: (r.arrival_s, r.request_id))
    if not queue:
        return 0, 0
    if any(r.arrival_s > 0 for r in queue):
        m = min(queue[0].isl, max_num_tokens)
        return m, m
    best, budget = (0, 0), max_num_tokens
    for r in queue:
        done = 0
        while done < r.isl:
            take = min(r.isl - done, budget)
            done += take
            budget -= take
            if take * done > best[0] * best[1]:
                best = (take, done)
            if budget == 0:
                budget = max_num_tokens
    return best


def cpu_attention_bytes(spec, chunk: int, keys: int) -> int:
    """Transient bytes of one CPU attention call of `chunk` queries over `keys` keys in the engine (engine/layers.py
    attend: SDPA per segment, fp32; v is zero-padded to the qk head dim only on CUDA, PAD_V_DEVICES). torch's CPU
    flash kernel needs one head dim for q, k and v; otherwise (MLA: v 128 vs qk 192) SDPA's math path builds the
    causal mask (1 byte) and the fp32 scores and probabilities (2 x heads x 4 bytes) per (query, key) pair. A lower
    bound: torch 2.13's math path measured 2.5 x heads x 4 bytes per pair on this machine (L = S = 6000, 4 heads)."""
    if spec.attention != "mla" or spec.v_head_dim == spec.qk_nope_head_dim + spec.qk_rope_head_dim:
        return 0  # the flash kernel: no per-pair buffer
    return chunk * keys * (1 + 2 * spec.num_heads * 4)


@dataclass(frozen=True)
class RunNeeds:
    """Bytes the run takes at its largest mode: per rank (host on cpu, device on cuda) and in /dev/shm."""

    per_rank: tuple[int, ...]  # by rank, the largest mode (memory.py's parts)
    per_rank_mode: str  # the mode that decided per_rank's largest entry
    shm_bytes: int  # /dev/shm, all ranks together (DWDP on cpu: every rank's local experts)
    device: str  # "cpu" | "cuda"
    attention: tuple[int, ...] = ()  # by rank, on cpu: cpu_attention_bytes of its largest chunk (every mode)
    shm_files: int = 0  # /dev/shm files (segments) all ranks create together (`shm_segments`)

    def host_per_rank(self) -> tuple[int, ...]:
        """per_rank plus the CPU attention scores: what a rank takes at its peak."""
        return tuple(b + (self.attention[r] if r < len(self.attention) else 0) for r, b in enumerate(self.per_rank))


def mode_rank_bytes(cfg: BenchConfig, mode: str, rank: int) -> tuple[int, int]:
    """(bytes rank `rank` holds in `mode`, of which in /dev/shm): memory.py's parts, priced for the engine (dense
    weights in the activation dtype, no KV-cache floor)."""
    spec, d = cfg.model.spec(), cfg.dwdp
    kw = dict(weight_dtype=d.weight_dtype, max_num_tokens=cfg.workload.max_num_tokens)
    if mode == "dwdp":
        m = dwdp_ranks(spec, d, engine_dense=True, **kw)[rank % d.dwdp_size]
        return m.total, m.routed_experts if cfg.run.device == "cpu" else 0
    # reference: every expert on every rank (one group of one); DEP: ceil(E / ranks) experts + all-to-all buffers
    return rank_memory(spec, "dep", group_size=1 if mode == "reference" else cfg.run.ranks, engine_dense=True, **kw).total, 0


def shm_segments(cfg: BenchConfig, mode: str) -> int:
    """The /dev/shm files `mode` creates on all ranks together: the CPU transport's one segment per rank, MoE layer and
    expert tensor (runtime.py allocates them all before any is unlinked); 0 off the CPU or outside DWDP."""
    if mode != "dwdp" or cfg.run.device != "cpu":
        return 0
    from ..core.expert_buffers import expert_tensor_names

    return cfg.run.ranks * cfg.model.spec().num_moe_layers * len(expert_tensor_names(cfg.dwdp.weight_dtype))


def run_needs(cfg: BenchConfig, modes: tuple[str, ...] | None = None,
              queues: list[list[Request]] | None = None) -> RunNeeds:
    """Bytes of the largest of `modes` (default run.modes), per rank and in /dev/shm; on cpu also each rank's
    attention scores (its queue from `queues`, else generated from cfg.workload as the run will)."""
    best: tuple[int, str] = (-1, "")
    per_rank = [0] * cfg.run.ranks
    shm = 0
    files = 0
    for mode in modes or cfg.run.modes:
        rows = [mode_rank_bytes(cfg, mode, r) for r in range(cfg.run.ranks)]
        shm = max(shm, sum(s for _, s in rows))
        files = max(files, shm_segments(cfg, mode))
        for r, (b, _) in enumerate(rows):
            per_rank[r] = max(per_rank[r], b)
        top = max(b for b, _ in rows)
        if top > best[0]:
            best = (top, mode)
    attention: tuple[int, ...] = ()
    if cfg.run.device == "cpu":
        from ..spec.workload import generate_requests

        spec = cfg.model.spec()
        queues = queues if queues is not None else generate_requests(cfg.workload, cfg.run.ranks)
        attention = tuple(cpu_attention_bytes(spec, *largest_attention_chunk(q, cfg.workload.max_num_tokens))
                          for q in queues)
    return RunNeeds(per_rank=tuple(per_rank), per_rank_mode=best[1], shm_bytes=shm, device=cfg.run.device,
                    attention=attention, shm_files=files)


def _shm_remedy(cfg: BenchConfig) -> str:
    shrink = [f"fewer model.num_layers (now {cfg.model.spec().num_layers})",
              f"fewer run.ranks (now {cfg.run.ranks}: every DWDP group holds every expert)"]
    if cfg.dwdp.weight_dtype == "float32":
        shrink.append("dwdp.weight_dtype bf16 instead of float32")
    shrink.append("dwdp left out of run.modes")
    return ("In a container, start it with a larger, writable /dev/shm (docker run --shm-size=<N>g, or --ipc=host to use "
            "the host's; Kubernetes: an emptyDir with medium: Memory mounted at /dev/shm), or free /dev/shm; or shrink the "
            f"run: {', '.join(shrink)}")


def _mem_remedy(cfg: BenchConfig, where: str, modes: tuple[str, ...], attention: bool = False) -> str:
    shrink = [f"a smaller workload.max_num_tokens (now {cfg.workload.max_num_tokens}: activations)",
              f"fewer model.num_layers (now {cfg.model.spec().num_layers})"]
    if "dwdp" in modes and cfg.dwdp.dwdp_size < cfg.run.ranks:
        shrink.append(f"a larger dwdp.dwdp_size (now {cfg.dwdp.dwdp_size}: fewer local experts per rank)")
    if attention:
        shrink.insert(1, f"a shorter workload.isl (now {cfg.workload.isl}: CPU attention scores grow with chunk x prefix)")
    shrink.append(f"fewer run.ranks (now {cfg.run.ranks}) {where}")
    if cfg.dwdp.weight_dtype == "float32":
        shrink.append("dwdp.weight_dtype bf16 instead of float32")
    tail = "; mode reference holds every expert on every rank" if "reference" in modes else ""
    return f"Shrink the run: {', '.join(shrink)}{tail}"


def check_resources(cfg: BenchConfig, free: FreeResources, *, file: str | None = None,
                    modes: tuple[str, ...] | None = None, queues: list[list[Request]] | None = None) -> RunNeeds:
    """Raise PreflightError (one paragraph: numbers and remedy) when the run does not fit `free`."""
    needs = run_needs(cfg, modes, queues)
    modes = modes or cfg.run.modes
    counted = ("estimate: weights, prefetch slots and activations of memory.py; the Python/torch runtime of each "
               "process is not counted")
    if needs.shm_files and free.shm_readonly:
        raise PreflightError(file, "/dev/shm",
                             f"/dev/shm is mounted read-only, but the run creates {needs.shm_files:,} segment files there "
                             f"(the CPU transport: every rank's local experts, {cfg.run.ranks} ranks); the first would fail "
                             f"with EROFS. {_shm_remedy(cfg)}")
    if needs.shm_files and free.shm_files_free is not None and needs.shm_files > free.shm_files_free:
        raise PreflightError(file, "/dev/shm",
                             f"the run creates {needs.shm_files:,} segment files in /dev/shm (one per rank, MoE layer and "
                             f"expert tensor, {cfg.run.ranks} ranks) but /dev/shm has {free.shm_files_free:,} free inodes "
                             "(statvfs f_favail; its bytes do not matter when no file can be created): a rank would "
                             f"fail with ENOSPC. {_shm_remedy(cfg)}")
    if needs.shm_bytes and free.shm_free is not None and needs.shm_bytes > free.shm_free:
        raise PreflightError(file, "/dev/shm",
                             f"the run maps {fmt_bytes(needs.shm_bytes, exact=True)} into /dev/shm (the CPU transport's "
                             f"segments: every rank's local experts, {cfg.run.ranks} ranks) but /dev/shm has "
                             f"{fmt_bytes(free.shm_free, exact=True)} free of {fmt_bytes(free.shm_total or 0, exact=True)}; "
                             "a rank would die of SIGBUS when it touches the "
                             f"missing pages. {_shm_remedy(cfg)}")
    worst = max(range(len(needs.per_rank)), key=lambda r: needs.per_rank[r])
    if needs.device == "cpu":
        host = needs.host_per_rank()
        worst = max(range(len(host)), key=lambda r: host[r])
        scores = bool(needs.attention and needs.attention[worst])
        if scores:
            counted = ("estimate: weights, prefetch slots and activations of memory.py, plus "
                       f"{fmt_bytes(needs.attention[worst], exact=True)} "
                       "of attention scores (the CPU engine's SDPA math path for MLA: mask + fp32 scores of its largest "
                       "chunk, a lower bound); the Python/torch runtime of each process is not counted")
        total = sum(host)
        if free.host_available is not None and total > free.host_available:
            raise PreflightError(file, "host memory",
                                 f"{cfg.run.ranks} ranks need about {fmt_bytes(total, exact=True)} of host memory "
                                 f"together (rank {worst}: {fmt_bytes(host[worst], exact=True)} in mode "
                                 f"{needs.per_rank_mode}; {counted}) but {fmt_bytes(free.host_available, exact=True)} is "
                                 f"available ({free.host_limit_source}); the kernel's OOM "
                                 f"killer would end a rank with SIGKILL. {_mem_remedy(cfg, 'on this machine', modes, scores)}")
        if free.process_cap is not None and host[worst] > free.process_cap:
            raise PreflightError(file, "host memory",
                                 f"rank {worst} needs about {fmt_bytes(host[worst], exact=True)} in mode "
                                 f"{needs.per_rank_mode} ({counted}) but a process may map at most "
                                 f"{fmt_bytes(free.process_cap, exact=True)} (ulimit -v / "
                                 f"RLIMIT_AS). Raise the limit (ulimit -v unlimited). {_mem_remedy(cfg, 'on this machine', modes, scores)}")
        return needs
    if free.gpu_free:
        n = len(free.gpu_free)
        for g in range(n):
            ranks = [r for r in range(cfg.run.ranks) if r % n == g]  # engine/worker.rank_device: cuda:(r % n)
            total = sum(needs.per_rank[r] for r in ranks)
            if total > free.gpu_free[g]:
                raise PreflightError(file, "device memory",
                                     f"GPU {g} runs rank(s) {ranks}, which need about {fmt_bytes(total, exact=True)} of "
                                     f"device memory together (largest mode {needs.per_rank_mode}; {counted}, nor the CUDA "
                                     f"context) but GPU {g} has {fmt_bytes(free.gpu_free[g], exact=True)} free of "
                                     f"{fmt_bytes((free.gpu_total or (0,) * n)[g], exact=True)}. "
                                     f"{_mem_remedy(cfg, 'per GPU', modes)}")
    return needs


def preflight(points, *, file: str | None = None, probe: Callable[..., FreeResources] | None = None,
              modes: tuple[str, ...] | None = None, warmup: bool = True, resources: bool = True) -> None:
    """Every check of every sweep point (SweepPoints or BenchConfigs) before the first point starts; raises
    PreflightError (exit 2). modes: the modes that will run (default each point's run.modes). probe: the machine's
    reading (default host_resources.read_free, looked up at call time so that tests replace it there)."""
    from ..spec.workload import generate_requests

    probe = probe or host_resources.read_free
    free: dict[str, FreeResources] = {}  # one reading per device kind
    for p in points:
        cfg: BenchConfig = getattr(p, "config", p)
        queues = generate_requests(cfg.workload, cfg.run.ranks)
        if warmup:
            check_warmup(cfg, queues, file=file)
        if not resources:
            continue
        if cfg.run.device not in free:
            free[cfg.run.device] = probe(gpus=cfg.run.device == "cuda")
        check_resources(cfg, free[cfg.run.device], file=file, modes=modes, queues=queues)
