"""What to plan for: model, GPU, candidates, workload and what is known about them (PlanSpec; pure data).

The planner (perf/planner.py) prices a PlanSpec into PlanRows (perf/plan_row.py); `dwdp plan` builds one from its
arguments (commands/plan.build_spec).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.models import ModelSpec
from . import cost_model as cm
from .calibration import Calibration
from .hardware import GpuSpec
from .imbalance import Workload
from .kernel_tables import KV_DTYPE, ShapeTables, shape_tables
from .phases import default_dep_comm

MiB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class PlanSpec:
    """What to plan for: model, GPU, candidate configurations and workload."""

    model: ModelSpec
    gpu: GpuSpec
    weight_dtype: str = "fp8"
    dwdp_sizes: tuple[int, ...] = (4,)
    isls: tuple[int, ...] = (8192,)
    batch: int | None = 1
    mnt: int | None = None
    mnt_default: bool = False  # mnt is the context servers' default (memory.context_max_num_tokens), not given
    isl_dist: str = "fixed"
    isl_ratio: float = 0.8
    isl_cv: float = 0.0
    imbalance_cv: float = 0.0
    redundant_experts: tuple[int, ...] = (0,)
    slice_bytes: tuple[int, ...] = (2 * MiB,)
    dispatch_dtype: str = "fp8"
    a2a_dedup: bool = False
    interference: float | None = None
    calibration: Calibration = field(default_factory=Calibration)
    gpu_memory_gb: float | None = None
    source_policy: str = "balanced"
    samples: int = 256
    seed: int = 0
    target: str = "engine"  # trtllm | engine (phases.TARGETS); `dwdp plan` defaults to trtllm
    kernel_tables: str | None = None  # a kernel-table JSON instead of the shipped one for this GPU
    routing_skew: object = None  # routing_skew.RoutingSkewConfig; None = balanced routing
    dep_comm: str | None = None  # phases.DEP_COMMS; None = phases.default_dep_comm for this GPU and target
    linear_dtype: str | None = None  # dense GEMMs' dtype when not the weight dtype's (cost_model.CostParams)
    stated: tuple = ()  # (input, value as given) the user stated with its flag (perf/inputs.py: not ranged)
    provenance: tuple = ()  # (Calibration field, file) pairs: which loaded file set which field (perf/inputs.py)
    not_priced: tuple = ()  # model features / config.json keys the planner does not price (model_dims.not_priced)
    dep_variants: tuple = ("trtllm",)  # the DEPs compared against (perf/dep_variants.py; `dwdp plan` prices every one
    #                                    that applies unless --dep names one)
    gemm: str | None = None  # the TensorRT-LLM host's expert path on DWDP layers (perf/moe_op.GEMMS); None: not known
    gemm_how: str = ""  # how it was chosen (--gemm, or integration/moe_evidence.priced_gemm's default)

    @property
    def dep_comm_path(self) -> str:
        """DEP's communication path: the given one, else what TensorRT-LLM selects on this GPU for a group size DeepEP
        runs (target trtllm) or our engine's all-to-all (target engine, or trtllm without a table); a row's own
        path is dep_comm_for(its group size)."""
        return self.dep_comm_for(None)

    def dep_comm_for(self, group: int | None) -> str:
        """DEP's communication path at this group size as priced (phases.default_dep_comm when none is given)."""
        if self.dep_comm is not None:
            return self.dep_comm
        return default_dep_comm(self.gpu.name, "trtllm" if self.tables is not None else "engine", group)

    @property
    def tables(self) -> ShapeTables | None:
        """TensorRT-LLM kernel tables of this model on this GPU with MoE rows and an attention core for this weight
        dtype (target trtllm), or None (then priced as the engine)."""
        if self.target != "trtllm":
            return None
        t = shape_tables(self.model, self.gpu.name, self.kernel_tables)
        if t is None or not t.moe_eps(self.weight_dtype) or t.core_grid(KV_DTYPE[self.weight_dtype]) is None:
            return None
        return t

    @property
    def dwdp_experts(self):
        """moe_op.ExpertPricing: which op prices DWDP's routed experts (target trtllm; this project's op under gemm
        multi_buffer, from the calibration's moe_op record or the shipped table, else TensorRT-LLM's table)."""
        from .moe_op import ExpertPricing, dwdp_pricing
        if self.tables is None:
            return ExpertPricing(None, "")
        return dwdp_pricing(self.model, self.gpu.name, self.weight_dtype, self.gemm, self.calibration)

    @property
    def priced_as(self) -> str:
        """The target the rows are priced for ('engine (no TensorRT-LLM table for ...)' when trtllm has none)."""
        if self.target == "trtllm" and self.tables is None:
            return (f"engine (no TensorRT-LLM kernel table for {self.model.name}, {self.weight_dtype} experts, on "
                    f"{self.gpu.name})")
        return self.target

    @property
    def memory_budget_gb(self) -> float:
        return self.gpu_memory_gb if self.gpu_memory_gb is not None else self.gpu.memory_gb

    def params(self) -> cm.CostParams:
        return cm.CostParams(gpu=self.gpu, weight_dtype=self.weight_dtype, dispatch_dtype=self.dispatch_dtype,
                             a2a_dedup=self.a2a_dedup, calibration=self.calibration, linear_dtype=self.linear_dtype)

    def workload(self, isl: int) -> Workload:
        return Workload(isl=isl, isl_dist=self.isl_dist, isl_ratio=self.isl_ratio, isl_cv=self.isl_cv,  # type: ignore[arg-type]
                        imbalance_cv=self.imbalance_cv, batch=self.batch, mnt=self.mnt,
                        samples=self.samples, seed=self.seed)
