"""User-facing configuration: frozen dataclasses, loaded from YAML, validated once.

`DwdpConfig` carries upstream TensorRT-LLM's DwdpConfig fields with the same names and meaning
(dwdp_size, num_groups, num_experts_per_worker, num_prefetch_experts, contention_opt) plus ours.
`BenchConfig` is the whole file that `dwdp bench` reads: model, dwdp, workload, run.
Every field is documented with `doc(...)`; docs/CONFIG.md is generated from these docs.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..byte_units import MiB
from .models import PRESETS, ModelSpec, get_model
from .routing_skew import RoutingSkewConfig
from .schema import MAX_SWEEP_POINTS, ConfigError, doc, expand_sweep, from_dict, load_yaml


WeightDtype = Literal["float32", "bf16", "fp8"]
GemmPath = Literal["multi_buffer", "composite_view", "merge", "reference"]
TransportKind = Literal["auto", "ipc", "vmm_fd", "vmm_fabric", "shm"]
SourcePolicy = Literal["balanced", "lowest_rank"]


#: upper bounds of the size keys (stated in their docs, docs/CONFIG.md): beyond them a run cannot fit any machine we target
MAX_TOKENS = 1 << 20  # isl, max_num_tokens
MAX_REQUESTS = 1_000_000  # requests per rank
MAX_RANKS = 1024
MAX_LAYERS = 1024
MAX_SLICE_BYTES = 1 << 30
MAX_COPY_LANES = 1024
MAX_INFLIGHT_SLICES = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class DwdpConfig:
    """DWDP group layout and runtime knobs (upstream-compatible names first)."""

    dwdp_size: int = doc("Ranks in one DWDP group (G). Experts of each MoE layer are spread over these ranks; any G in [1, "
                         "run.ranks], at most the model's experts.", 1)
    num_groups: int = doc("Independent DWDP groups; world size = num_groups * dwdp_size (upstream meaning): when not 1, "
                          "num_groups * dwdp_size must equal run.ranks.", 1)
    num_experts_per_worker: int = doc(
        "Upstream mode: experts held by each rank, rank r holds [r*num_prefetch_experts, r*num_prefetch_experts + "
        "num_experts_per_worker), at most the model's experts. 0 = derive a balanced placement from dwdp_size and "
        "redundant_experts.", 0)
    num_prefetch_experts: int = doc(
        "Upstream mode: stride between consecutive ranks' expert ranges (overlap when smaller than "
        "num_experts_per_worker), in [0, num_experts_per_worker]. 0 together with num_experts_per_worker = 0 selects "
        "the derived placement.", 0)
    contention_opt: bool = doc(
        "Slice peer pulls into slice_bytes pieces issued round-robin across sources (time-division multiplexing, "
        "paper 4.3.2). Upstream name; on by default here.", True)
    redundant_experts: int = doc(
        "Derived placement only: extra experts each rank holds beyond its share (replicas shrink every rank's fetch); "
        "its share plus these at most the model's experts.", 0)
    slice_bytes: int = doc(f"Slice size of sliced copies in bytes; a positive multiple of 256, at most {MAX_SLICE_BYTES:,} (1 GiB).",
                           2 * MiB)
    weight_dtype: WeightDtype = doc("Routed-expert weight dtype. float32 is for CPU tests; fp8 is e4m3 with 128x128 block scales (CUDA only).", "bf16")
    gemm: GemmPath = doc(
        "How the MoE reads local + fetched experts: multi_buffer (dwdp::grouped_gemm op, per-expert pointers), "
        "composite_view (CUDA VMM maps both into one [E,...] range), merge (copy into one tensor, then torch._grouped_mm), "
        "reference (per-expert loop). The default merge is the bench engine's; an integration YAML "
        "(DWDP_TRTLLM_CONFIG) without gemm means moe_evidence.default_gemm: multi_buffer for fp8 block-scale experts "
        "on sm_90, else composite_view.", "merge")
    transport: TransportKind = doc(
        "How peers' expert weights become addressable: ipc (cudaIpc handles), vmm_fd (cuMem + POSIX fd, x86 H100/H200), "
        "vmm_fabric (fabric handles, NVL72), shm (CPU shared memory), auto (shm on CPU, ipc on CUDA).", "auto")
    prefetch_depth: int = doc("Layers prefetched ahead of the one computing; slots = min(prefetch_depth + 1, MoE layers), at least 2 (prefetcher.prefetch_slot_count). In [1, the model's MoE layers].",
                              1)
    source_policy: SourcePolicy = doc(
        "Which owner serves a replicated expert: balanced (minimise the largest per-source load) or lowest_rank (upstream).", "balanced")
    pacing: Literal["none", "after_attention"] = doc(
        "Copy pacing: none issues layer l+1's pulls as soon as its slot is free; after_attention holds them until the "
        "attention of layer l has been enqueued so copies overlap the MoE GEMMs rather than attention.", "none")
    max_inflight_slices: int = doc("Sliced copies, method batch: split a layer's plan into batches of at most this many "
                                   f"slices (0 = one batch); in [0, {MAX_INFLIGHT_SLICES:,}].", 0)
    copy_method: Literal["auto", "graph", "batch", "per_op", "torch"] = doc(
        "How the copy scheduler issues a layer's pulls on CUDA: graph (one CUDA-graph replay of the recorded plan, "
        "measured fastest), batch (cuMemcpyBatchAsync), per_op (one cudaMemcpyAsync per op), torch (Tensor.copy_); "
        "auto = graph on CUDA, torch on CPU.", "auto")
    copy_lanes: int = doc(f"Graph method: parallel copy chains per layer (0 = one per source peer); in [0, {MAX_COPY_LANES}].", 0)

    def __post_init__(self) -> None:
        for name in ("dwdp_size", "num_groups", "prefetch_depth"):
            if getattr(self, name) < 1:
                raise ConfigError(None, name, f"expected an integer >= 1, got {getattr(self, name)}")
        for name in ("num_experts_per_worker", "num_prefetch_experts", "redundant_experts", "max_inflight_slices",
                     "copy_lanes"):
            if getattr(self, name) < 0:
                raise ConfigError(None, name, f"expected an integer >= 0, got {getattr(self, name)}")
        if not 0 < self.slice_bytes <= MAX_SLICE_BYTES or self.slice_bytes % 256:
            raise ConfigError(None, "slice_bytes", f"expected a positive multiple of 256 up to {MAX_SLICE_BYTES:,}, "
                                                   f"got {self.slice_bytes}")
        for name, hi in (("max_inflight_slices", MAX_INFLIGHT_SLICES), ("copy_lanes", MAX_COPY_LANES)):
            if getattr(self, name) > hi:
                raise ConfigError(None, name, f"expected an integer in [0, {hi:,}], got {getattr(self, name)}")
        upstream = self.num_experts_per_worker > 0 or self.num_prefetch_experts > 0
        if upstream and (self.num_experts_per_worker == 0 or self.num_prefetch_experts == 0):
            raise ConfigError(None, "num_prefetch_experts" if self.num_prefetch_experts == 0 else "num_experts_per_worker",
                              "upstream placement needs both num_experts_per_worker and num_prefetch_experts > 0 (or both 0)")
        if upstream and self.redundant_experts:
            raise ConfigError(None, "redundant_experts", "only applies to the derived placement (num_experts_per_worker: 0)")
        if upstream and self.num_prefetch_experts > self.num_experts_per_worker:
            raise ConfigError(None, "num_prefetch_experts",
                              f"stride {self.num_prefetch_experts} > num_experts_per_worker {self.num_experts_per_worker} "
                              "leaves experts between ranges unowned")

    @property
    def upstream_placement(self) -> bool:
        return self.num_experts_per_worker > 0

    @property
    def world_size(self) -> int:
        return self.num_groups * self.dwdp_size

    @property
    def num_slots(self) -> int:
        return self.prefetch_depth + 1

    def validate_for(self, num_experts: int, world_size: int | None = None, *, file: str | None = None,
                     prefix: str = "dwdp", num_moe_layers: int | None = None) -> None:
        """Cross-checks against the model (its experts; its MoE layers when given) and the launched world; raises
        ConfigError naming the key."""
        key = lambda k: f"{prefix}.{k}" if prefix else k  # noqa: E731
        if num_moe_layers is not None and self.prefetch_depth > num_moe_layers:
            raise ConfigError(file, key("prefetch_depth"), f"{self.prefetch_depth} is more than the model's "
                                                          f"{num_moe_layers} MoE layers")
        if world_size is not None and self.dwdp_size > world_size:
            raise ConfigError(file, key("dwdp_size"), f"dwdp_size {self.dwdp_size} is larger than the world of {world_size} ranks")
        if world_size is not None and world_size % self.dwdp_size:
            raise ConfigError(file, key("dwdp_size"), f"world of {world_size} ranks is not a whole number of groups of {self.dwdp_size}")
        if self.upstream_placement:
            last_end = (self.dwdp_size - 1) * self.num_prefetch_experts + self.num_experts_per_worker
            if last_end != num_experts:
                raise ConfigError(file, key("num_experts_per_worker"),
                                  f"(dwdp_size-1)*num_prefetch_experts + num_experts_per_worker = {last_end} must equal "
                                  f"the model's {num_experts} experts (fewer leaves experts unowned, more runs past the last)")
        else:
            if self.dwdp_size > num_experts:
                raise ConfigError(file, key("dwdp_size"),
                                  f"dwdp_size {self.dwdp_size} is larger than the model's {num_experts} experts "
                                  "(some ranks would hold no expert of their own)")
            per_rank = -(-num_experts // self.dwdp_size) + self.redundant_experts
            if per_rank > num_experts:
                raise ConfigError(file, key("redundant_experts"),
                                  f"{self.redundant_experts} extra experts per rank exceed the model's {num_experts} experts")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """Which model the engine builds."""

    preset: str | None = doc(
        f"Model preset: one of {', '.join(sorted(PRESETS))}; null: the checkpoint's config.json when `checkpoint` is "
        "set, else tiny. Given together with a checkpoint, it must agree with the checkpoint's config.json.", None)
    num_layers: int | None = doc(f"Truncate the model to this many layers (full per-layer dims), in [1, min({MAX_LAYERS}, the "
                                 "model's layers)]; null keeps all. With a "
                                 "checkpoint only these layers are read.", None)
    first_k_dense: int | None = doc(
        "Dense (non-MoE) layers at the start, in [0, num_layers - 1]; null keeps the model's, capped at "
        "num_layers - 1. Benchmarks of "
        "truncated models set it low so that most layers are MoE.", None)
    dtype: Literal["float32", "bf16"] = doc("Activation/compute dtype of the engine (float32 for exact CPU checks).", "float32")
    seed: int = doc("Seed of the random weights (identical on every rank), in [0, 2**63).", 0)
    checkpoint: str | None = doc(
        "Directory of a HuggingFace-layout safetensors checkpoint (config.json + *.safetensors, optionally "
        "model.safetensors.index.json); the model spec is read from its config.json when the config is read, the tensors' headers before any rank "
        "starts (`dwdp bench`, `dwdp verify`). null = seeded random weights.", None)
    fp8_linear: bool | None = doc(
        "Run the linear layers an FP8 checkpoint quantises (attention projections, dense MLPs, shared experts; not the "
        "embedding, norms or router) as FP8 block-scale GEMMs: 1x128 activation groups, 128x128 weight blocks (the "
        "checkpoint's own _scale_inv, else our quantisation of the weights), as TensorRT-LLM runs them on Hopper "
        "(engine/fp8_linear.py). null: on when dwdp.weight_dtype is fp8; false: every GEMM at `dtype` on dequantised "
        "weights.", None)

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise ConfigError(None, "preset", f"unknown model preset {self.preset!r}; expected one of {', '.join(sorted(PRESETS))}")
        if self.num_layers is not None and not 1 <= self.num_layers <= MAX_LAYERS:
            raise ConfigError(None, "num_layers", f"expected an integer in [1, {MAX_LAYERS}] or null, got {self.num_layers}")
        if not 0 <= self.seed < 2 ** 63:
            raise ConfigError(None, "seed", f"expected an integer in [0, 2**63), got {self.seed}")
        if self.checkpoint is not None:
            full = self._checkpoint_spec()
            if self.preset is not None and full is not PRESETS[self.preset]:
                _check_preset_matches(PRESETS[self.preset], full, self.checkpoint)
        else:
            full = PRESETS[self.preset or "tiny"]
        layers = self.num_layers if self.num_layers is not None else full.num_layers
        if self.num_layers is not None and self.num_layers > full.num_layers:
            raise ConfigError(None, "num_layers", f"{self.num_layers} is more than the model's {full.num_layers} layers")
        if self.first_k_dense is not None and not 0 <= self.first_k_dense < layers:
            raise ConfigError(None, "first_k_dense", f"expected an integer in [0, {layers - 1}] (at least one MoE layer), "
                                                     f"got {self.first_k_dense}")

    def _checkpoint_spec(self) -> ModelSpec:
        from .hf_config import spec_from_hf_config

        if not self.checkpoint:
            raise ConfigError(None, "checkpoint", "empty string: give the checkpoint directory, or null for seeded weights")
        p = Path(self.checkpoint)
        if not p.is_dir():
            raise ConfigError(None, "checkpoint", f"{self.checkpoint!r} "
                              + ("is a file; expected the checkpoint directory (config.json + *.safetensors)" if p.exists()
                                 else "does not exist"))
        if not (p / "config.json").exists():
            if self.preset is not None:
                return PRESETS[self.preset]  # a weights-only checkpoint (engine.loader.save_checkpoint) of a preset
            raise ConfigError(None, "checkpoint", f"{p / 'config.json'}: config.json not found (the model spec is read "
                                                  "from it; for a weights-only directory give model.preset)")
        try:
            return spec_from_hf_config(p)
        except ConfigError as e:  # keep the config.json path and key in the message, under model.checkpoint
            raise ConfigError(None, "checkpoint", f"{e.file}: {e.key + ': ' if e.key else ''}{e.expected}") from None

    def spec(self) -> ModelSpec:
        if self.checkpoint is None:
            return get_model(self.preset or "tiny", self.num_layers, self.first_k_dense)
        full = self._checkpoint_spec()
        if self.num_layers is None and self.first_k_dense is None:
            return full
        return full.truncated(full.num_layers if self.num_layers is None else self.num_layers, self.first_k_dense)


def _check_preset_matches(preset: ModelSpec, ckpt: ModelSpec, path: str) -> None:
    """A preset named together with a checkpoint must describe the same model (every dim but the name and the MTP
    layers, which presets do not carry: the engine runs the trunk only)."""
    for f in dataclasses.fields(ModelSpec):
        if f.name not in ("name", "mtp_layers") and getattr(preset, f.name) != getattr(ckpt, f.name):
            raise ConfigError(None, "preset", f"preset {preset.name!r} has {f.name}={getattr(preset, f.name)!r} but "
                                              f"{path}/config.json gives {getattr(ckpt, f.name)!r}; drop the preset "
                                              "(the checkpoint's config.json is enough) or fix it")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadConfig:
    """Requests each rank serves in a benchmark (context phase only)."""

    isl: int = doc(f"Mean input sequence length in tokens, in [1, {MAX_TOKENS:,}].", 256)
    isl_dist: Literal["fixed", "uniform_ratio", "normal"] = doc(
        "Per-request ISL: fixed, uniform_ratio (uniform in [isl_ratio*isl, isl], the paper's 'ratio 0.8'), "
        "or normal with coefficient of variation isl_cv.", "uniform_ratio")
    isl_ratio: float = doc("Lower bound of uniform_ratio as a fraction of isl, in (0, 1].", 0.8)
    isl_cv: float = doc("Coefficient of variation of ISL for isl_dist: normal, in [0, 10].", 0.0)
    imbalance_cv: float = doc("Across-rank coefficient of variation of each rank's mean ISL (0 = balanced ranks), "
                                "in [0, 1).", 0.0)
    requests_per_rank: int = doc(f"Requests in each rank's queue (ignored when tokens_per_rank > 0), in [1, "
                                 f"{MAX_REQUESTS:,}].", 8)
    tokens_per_rank: int = doc(
        "When > 0: each rank's queue holds ceil(tokens_per_rank / isl) requests, so sweeps over isl keep a "
        "comparable amount of work (and steady-state iterations) per point. In [0, "
        f"{MAX_TOKENS * MAX_REQUESTS // 1000:,}], at most {MAX_REQUESTS:,} requests.", 0)
    arrival: Literal["offline", "poisson"] = doc("offline: all requests queued at t=0 (throughput); poisson: arrivals at `rate`.", "offline")
    rate: float = doc("Poisson arrival rate per rank, requests per second (arrival: poisson), in (0, 1e6].", 1.0)
    max_num_tokens: int = doc("Max tokens per iteration per rank (MNT); each rank packs its own queue up to this. "
                              f"In [1, {MAX_TOKENS:,}].", 1024)
    seed: int = doc("Seed of the workload generator, in [0, 2**63).", 0)
    routing_skew: RoutingSkewConfig = doc("Routing skew: per-layer expert popularity the engine's router steers to "
                                          "(the same in DEP and DWDP; kind none leaves routing untouched).",
                                          factory=RoutingSkewConfig)

    @property
    def num_requests(self) -> int:
        """Requests per rank: from tokens_per_rank when set, else requests_per_rank."""
        return -(-self.tokens_per_rank // self.isl) if self.tokens_per_rank > 0 else self.requests_per_rank

    def __post_init__(self) -> None:
        checks = [
            ("isl", 1 <= self.isl <= MAX_TOKENS, f"an integer in [1, {MAX_TOKENS:,}]"),
            ("isl_ratio", 0 < self.isl_ratio <= 1, "a number in (0, 1]"),
            ("isl_cv", 0 <= self.isl_cv <= 10, "a number in [0, 10]"),
            ("imbalance_cv", 0 <= self.imbalance_cv < 1, "a number in [0, 1)"),
            ("requests_per_rank", 1 <= self.requests_per_rank <= MAX_REQUESTS, f"an integer in [1, {MAX_REQUESTS:,}]"),
            ("tokens_per_rank", 0 <= self.tokens_per_rank <= MAX_TOKENS * MAX_REQUESTS // 1000,
             f"an integer in [0, {MAX_TOKENS * MAX_REQUESTS // 1000:,}]"),
            ("rate", 0 < self.rate <= 1e6, "a number in (0, 1e6]"),
            ("max_num_tokens", 1 <= self.max_num_tokens <= MAX_TOKENS, f"an integer in [1, {MAX_TOKENS:,}]"),
            ("seed", 0 <= self.seed < 2 ** 63, "an integer in [0, 2**63)"),
        ]
        for key, ok, expected in checks:
            if not ok:
                raise ConfigError(None, key, f"expected {expected}, got {getattr(self, key)!r}")
        if self.num_requests > MAX_REQUESTS:
            raise ConfigError(None, "tokens_per_rank", f"{self.tokens_per_rank:,} tokens at isl {self.isl} make "
                                                       f"{self.num_requests:,} requests per rank, more than {MAX_REQUESTS:,}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Where and how the benchmark runs."""

    device: Literal["cpu", "cuda"] = doc("cpu (gloo + shared memory) or cuda (NCCL + CUDA IPC/VMM; ranks may share a GPU).", "cpu")
    ranks: int = doc(f"Ranks (processes) launched on this machine, in [1, {MAX_RANKS}].", 4)
    modes: tuple[Literal["dep", "dwdp", "reference"], ...] = doc("Parallel modes to run and compare.", ("dep", "dwdp"))
    warmup_iters: int = doc("Iterations per rank excluded from the metrics, in [0, 1000]; a run must measure at "
                                "least one.", 1)
    timeout_s: float = doc("Wall-clock limit of one mode's run in seconds, in (0, 604800] (a week); a rank that "
                                "exceeds it ends the run with an error.", 600.0)
    threads_per_rank: int = doc("torch CPU threads per rank (cpu device), in [1, 1024].", 1)
    repeat: int = doc("Times each point runs (every mode, the same requests), in [1, 100]; with more than one the "
                      "table shows the median and min-max of every rate, TTFT and gain over the repeats "
                      "(`dwdp bench --repeat N` overrides it).", 1)

    def __post_init__(self) -> None:
        if not 1 <= self.ranks <= MAX_RANKS:
            raise ConfigError(None, "ranks", f"expected an integer in [1, {MAX_RANKS}], got {self.ranks}")
        if not self.modes:
            raise ConfigError(None, "modes", "expected at least one of dep, dwdp, reference")
        if not 0 <= self.warmup_iters <= 1000:
            raise ConfigError(None, "warmup_iters", f"expected an integer in [0, 1000], got {self.warmup_iters}")
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= 7 * 86400):
            raise ConfigError(None, "timeout_s", f"expected a finite number of seconds in (0, 604800], got {self.timeout_s}")
        if not 1 <= self.threads_per_rank <= 1024:
            raise ConfigError(None, "threads_per_rank", f"expected an integer in [1, 1024], got {self.threads_per_rank}")
        if not 1 <= self.repeat <= 100:
            raise ConfigError(None, "repeat", f"expected an integer in [1, 100], got {self.repeat}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig:
    """One `dwdp bench` point: model, DWDP layout, workload and run settings."""

    model: ModelConfig = doc("Model section.", factory=ModelConfig)
    dwdp: DwdpConfig = doc("DWDP section (upstream DwdpConfig fields plus ours).", factory=DwdpConfig)
    workload: WorkloadConfig = doc("Workload section.", factory=WorkloadConfig)
    run: RunConfig = doc("Run section.", factory=RunConfig)

    def __post_init__(self) -> None:
        spec = self.model.spec()
        self.dwdp.validate_for(spec.num_experts, self.run.ranks, prefix="dwdp", num_moe_layers=spec.num_moe_layers)
        if self.dwdp.weight_dtype == "fp8" and self.run.device != "cuda":
            raise ConfigError(None, "dwdp.weight_dtype", "fp8 expert weights need run.device: cuda")
        if self.dwdp.transport in ("ipc", "vmm_fd", "vmm_fabric") and self.run.device != "cuda":
            raise ConfigError(None, "dwdp.transport", f"{self.dwdp.transport} needs run.device: cuda (use shm or auto on cpu)")
        if self.dwdp.gemm == "composite_view" and self.run.device != "cuda":
            raise ConfigError(None, "dwdp.gemm", "composite_view maps CUDA VMM allocations: needs run.device: cuda "
                                                 "(use multi_buffer, merge or reference on cpu)")
        if self.dwdp.gemm == "composite_view" and self.dwdp.transport not in ("auto", "vmm_fd", "vmm_fabric"):
            raise ConfigError(None, "dwdp.transport", f"gemm: composite_view maps local experts next to the slot, which "
                                                      f"needs cuMem allocations: transport vmm_fd or vmm_fabric (or auto), "
                                                      f"got {self.dwdp.transport!r}")
        if self.dwdp.transport == "shm" and self.run.device == "cuda":
            raise ConfigError(None, "dwdp.transport", "shm is the CPU transport; use auto, ipc or vmm_fd on cuda")
        if self.dwdp.copy_method == "graph" and self.run.device != "cuda":
            raise ConfigError(None, "dwdp.copy_method", "graph records CUDA graphs: needs run.device: cuda (use auto or torch on cpu)")
        if self.dwdp.num_groups != 1 and self.dwdp.num_groups * self.dwdp.dwdp_size != self.run.ranks:
            # num_groups 1 (the default) means "as many groups as run.ranks / dwdp_size"; a value given must agree
            raise ConfigError(None, "dwdp.num_groups", f"num_groups ({self.dwdp.num_groups}) x dwdp_size ({self.dwdp.dwdp_size}) "
                                                       f"must equal run.ranks ({self.run.ranks})")


def load_dwdp_config(path: str | Path) -> DwdpConfig:
    """A DwdpConfig from a YAML file (top level may be the fields or a `dwdp_config:`/`dwdp:` section)."""
    data = load_yaml(path)
    for section in ("dwdp_config", "dwdp"):
        if section in data:
            return from_dict(DwdpConfig, data[section], file=str(path), prefix=section)
    return from_dict(DwdpConfig, data, file=str(path))


def load_bench_points(data: dict, *, file: str | None = None,
                      max_points: int = MAX_SWEEP_POINTS) -> tuple[list[str], list[BenchConfig]]:
    """Expand sweeps in a bench config mapping (at most max_points points) and validate every point."""
    keys, points = expand_sweep(BenchConfig, data, file=file, max_points=max_points)
    return keys, [from_dict(BenchConfig, p, file=file) for p in points]
