"""Hopper MoE execution unit for gemm: multi_buffer: CutlassFusedMoE.run_moe computed by dwdp::grouped_gemm over
[local experts, prefetch slot] read in place (no merge copy), BF16 and FP8 block scales.

Shape legend: T tokens, K top-k, H hidden, I moe intermediate, E experts, n_local / n_fetch experts held / fetched.

Where it plugs in (upstream source read):
- Every caller reaches the expert GEMM through the backend's `run_moe`, looked up on the instance:
  CutlassFusedMoE.forward_chunk `self.run_moe(x=..., token_selected_experts=..., token_final_scales=...,
  x_sf=..., is_sf_swizzled=..., output_dtype=..., tuner_num_tokens=..., tuner_top_k=..., moe_output=...,
  lora_params=...)` (modules/fused_moe/fused_moe_cutlass.py, stored id 55194060208); the IPC-era
  ExternalCommMoEScheduler `moe.backend.run_moe(x=..., token_selected_experts=..., token_final_scales=..., x_sf=...,
  **_get_backend_kwargs(...))` after `backend.quantize_input(x, post_quant_comm=False)` (moe_scheduler.py stored
  id 52297624341; ConfigurableMoE stored id 3814212287 does the same inline); the MoEImplBase era
  `run_moe(self, ctx: MoERunContext, *, workspace=None)` (moe/fused_moe/fused_moe_cutlass.py @ 02320c358831;
  impl_base.py @ 210daf12df52 `run_moe(self, ctx)`; MoERunContext / MoECommPlan in
  impl_contract.py, stored ids 58454466051, 57374981836). All return the [T, H] output in `output_dtype`, written
  into `moe_output` / `ctx.comm_plan.moe_output` when one is given.
- So the unit is installed as an instance attribute `run_moe` on each DWDP layer's CutlassFusedMoE (install()):
  the backend class, its weights, quant method, ConfigurableMoE's exact-class checks (`moe.backend.__class__ ==
  CutlassFusedMoE` in _get_backend_kwargs) and our DWDP gate stay what they are; only the GEMM entry changes, and
  only on DWDP layers. Registering a new execution unit instead (moe_resolution IMPL_PRIORITY / BACKEND_FAMILY,
  stored id 57514324514) would need a MoeConfig.backend name, which TorchLlmArgs (extra="forbid", Literal)
  rejects (docs: reference/trtllm-conformance.md section 4).
- Weight layout: w3_w1_weight [E, 2I, H] holds w3 (up, "linear") first and w1 (gate) second
  (quantization.py load_expert_w3_w1_weight, stored id 55069560202: `dst_w3, _ = chunk(2)`, `_, dst_w1 =
  chunk(2)`), and the CUTLASS MoE computes act(second half) * first half (moe_kernels.cu doGatedActivationKernel:
  `fc1_value = gemm_result[i]`, `gate_value = gemm_result[i + inter_size]`, `fc1_value * fn(gate_value)`; stored
  ids 3775219850, 49366630937). The engine's SwiGLU reads that order in place with `up_first=True` (UP_FIRST): no
  copy of the [T*K, 2I] GEMM1 output, and the weights are never reordered, so every rank's exported experts keep
  TensorRT-LLM's layout whatever path a peer chose.
- FP8 block scales: w3_w1_weight_scaling_factor [E, 2*ceil(I/128), ceil(H/128)], w2_weight_scaling_factor
  [E, ceil(H/128), ceil(I/128)] fp32 (same quantization.py); activations are quantised 1x128 like the engine
  (moe_compute.Fp8Rows / quantize_act_1x128; the CUTLASS FP8 block-scale path also quantises inside the op:
  quantize_input "handled in kernel", fused_moe_cutlass.py @ 02320c358831). The op reads [2I, H] weights with
  ceil(2I/128) row blocks, which is TensorRT-LLM's per-half layout only when I % 128 == 0 (checked).

The computation is the engine's: engine/moe_compute.py routed_experts_forward(gemm="multi_buffer", up_first=True)
(gather_sorted -> grouped_gemm -> silu_mul / silu_mul_quant -> grouped_gemm -> combine).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Callable, NoReturn, Optional

import torch

from ...engine.moe_compute import identity_map, routed_experts_forward
from ...engine.weights import FP8_DTYPE
from ...core.runtime import ExpertSources  # the core's [local, slot] + expert map (as DwdpRuntime.expert_sources)

GEMM = "multi_buffer"
#: TensorRT-LLM routed-expert tensor names by role (quantization.py, stored id 55069560202)
W13, W2, W13_SCALE, W2_SCALE = "w3_w1_weight", "w2_weight", "w3_w1_weight_scaling_factor", "w2_weight_scaling_factor"
#: w3_w1_weight rows are w3 (up) | w1 (gate): the engine's SwiGLU reads them in place with up_first
UP_FIRST = True


def routed_forward(x_TH: torch.Tensor, ids_TK: torch.Tensor, scales_TK: Optional[torch.Tensor], src: ExpertSources,
                   out_dtype: torch.dtype) -> torch.Tensor:
    """y_TH = sum_k scales[t,k] * silu(w1_e x) * (w3_e x) @ w2_e^T with e = ids[t,k] (global ids): the engine's
    routed_experts_forward with gemm multi_buffer (every expert read in place from src.buffers by dwdp::grouped_gemm,
    engine/gemm_paths.py `_multi_buffer`) and up_first (w3_w1 rows are up | gate, read in place). Only what run_moe's
    arguments need is done here: the activation dtype, int64 ids, scales None, no tokens, out_dtype."""
    b = src.buffers
    w13 = b[W13]
    fp8 = w13[0].dtype == FP8_DTYPE
    # activations as the CUTLASS MoE takes them: the weights' dtype for BF16 (the op multiplies like dtypes), bf16
    # for FP8 block scales (_QUANT_SUPPORT_TABLE: FP8_BLOCK_SCALES dtypes {bfloat16};
    # fused_moe_cutlass.py @ 02320c358831)
    act_dtype = torch.bfloat16 if fp8 else w13[0].dtype
    if x_TH.dtype != act_dtype:
        x_TH = x_TH.to(act_dtype)
    ids_TK = ids_TK.long()  # TensorRT-LLM routes to int32 ids; sort_by_expert scatters with them
    if scales_TK is None:  # apply_router_weight_on_input: the weights are already folded into x (forward_chunk)
        scales_TK = torch.ones(ids_TK.shape, dtype=torch.float32, device=ids_TK.device)
    if x_TH.shape[0] == 0:
        return torch.zeros(0, b[W2][0].shape[1], dtype=out_dtype, device=x_TH.device)
    y_TH = routed_experts_forward(x_TH, ids_TK, scales_TK, w13, b[W2], src.expert_buffer_idx_E, src.expert_row_E,
                                  gemm=GEMM, w13_scale_sources=b.get(W13_SCALE) if fp8 else None,
                                  w2_scale_sources=b.get(W2_SCALE) if fp8 else None, up_first=UP_FIRST)
    # combine sums in float32 and returns the activation dtype; TensorRT-LLM asks output_dtype = x.dtype
    # (forward_impl, id 67533515591), the activation dtype on a real model, so this cast is a no-op there
    return y_TH if y_TH.dtype == out_dtype else y_TH.to(out_dtype)


def _is_ctx(obj) -> bool:
    return all(hasattr(obj, a) for a in ("token_selected_experts", "token_final_scales", "x", "x_sf"))


class RunMoe:
    """The callable installed as `backend.run_moe`: takes either calling convention (keywords / positional of the
    MoE-subclass era, or MoERunContext + workspace of the MoEImplBase era), returns what the original returns.
    The original's parameters and defaults are read once here; a call only maps its arguments onto them."""

    def __init__(self, backend: torch.nn.Module, sources: Callable[[], Optional[ExpertSources]], original):
        self.backend, self.sources, self.original = backend, sources, original
        params = [p for p in inspect.signature(original).parameters.values()  # bound method: no `self`
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY, p.KEYWORD_ONLY)]
        self.positional = tuple(p.name for p in params if p.kind != p.KEYWORD_ONLY)
        self.names = frozenset(p.name for p in params)
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self.calls = 0  # tests: the unit ran

    def _name(self) -> str:
        return f"{type(self.backend).__name__} (layer {getattr(self.backend, 'layer_idx', '?')})"

    def _fail(self, what: str) -> NoReturn:
        raise RuntimeError(f"dwdp_trtllm multi_buffer: {self._name()} {what}")

    def _args(self, args, kwargs) -> dict:
        if (args and _is_ctx(args[0])) or "ctx" in kwargs:
            ctx = args[0] if args else kwargs["ctx"]
            plan = getattr(ctx, "comm_plan", None)
            return {"x": ctx.x, "token_selected_experts": ctx.token_selected_experts,
                    "token_final_scales": ctx.token_final_scales, "x_sf": ctx.x_sf, "output_dtype": ctx.output_dtype,
                    "moe_output": getattr(plan, "moe_output", None),
                    "enable_alltoall": getattr(plan, "enable_alltoall", False),
                    "do_finalize": getattr(ctx, "do_finalize", True), "lora_params": getattr(ctx, "lora_params", None)}
        if len(args) > len(self.positional) or not self.names.issuperset(kwargs):
            raise TypeError(f"{self._name()}.run_moe: arguments {len(args)} positional + {sorted(kwargs)} do not fit "
                            f"{self.original.__qualname__}{inspect.signature(self.original)}")
        a = dict(self.defaults)
        a.update(zip(self.positional, args))
        a.update(kwargs)
        if a.get("enable_alltoall") is None:
            # "If None, defaults to self.enable_alltoall": a cached_property over alltoall_method_type, which __init__
            # always sets (NotEnabled with without_comm, the ConfigurableMoE backend) (id 55194060208)
            a["enable_alltoall"] = getattr(self.backend, "enable_alltoall", False)
        return a

    def __call__(self, *args, **kwargs) -> torch.Tensor:
        a = self._args(args, kwargs)
        x = a["x"]
        if not isinstance(x, torch.Tensor) or a.get("x_sf") is not None:
            self._fail("got pre-quantised activations (x_sf set); only BF16 and FP8 block-scale experts (activations "
                       "quantised here) are supported")
        if a.get("enable_alltoall"):
            self._fail("called with enable_alltoall; DWDP computes every expert on the rank (ep_size 1), there is no "
                       "token dispatch")
        if not a.get("do_finalize", True):
            self._fail("called with do_finalize=False (unsupported)")
        lora = a.get("lora_params")
        if lora and getattr(self.backend, "_moe_lora_active", lambda p: True)(lora):
            self._fail("received MoE LoRA parameters (unsupported)")
        src = self.sources()
        if src is None:
            self._fail("run_moe called outside wait_and_bind / record_compute_and_prefetch_next: no prefetch slot is "
                       "bound to it")
        out_dtype = a.get("output_dtype") or x.dtype
        y = routed_forward(x, a["token_selected_experts"], a["token_final_scales"], src, out_dtype)
        self.calls += 1
        out = a.get("moe_output")
        if out is not None:  # upstream writes in place and returns that buffer (id 55194060208 / 57675435166)
            out[: y.shape[0]].copy_(y)
            return out
        return y


def install(backend: torch.nn.Module, sources: Callable[[], Optional[ExpertSources]]) -> RunMoe:
    """Replace `backend.run_moe` on this instance with the unit (the class method stays, in `unit.original`)."""
    current = backend.__dict__.get("run_moe")
    original = current.original if isinstance(current, RunMoe) else backend.run_moe
    unit = RunMoe(backend, sources, original)
    backend.run_moe = unit  # a plain attribute (not a Module / Parameter): nn.Module stores it in __dict__
    return unit


def full_sources(backend: torch.nn.Module) -> ExpertSources:
    """The backend's own [E, ...] tensors (all experts, no DWDP) with the identity expert map."""
    names = [n for n in (W13, W2, W13_SCALE, W2_SCALE) if getattr(backend, n, None) is not None]
    w = getattr(backend, W13)
    return ExpertSources({n: [getattr(backend, n).data] for n in names}, *identity_map(w.shape[0], w.device))


def install_reference(model: torch.nn.Module) -> list[RunMoe]:
    """Single-process reference for multi_buffer: every backend owning all experts computes through the same unit
    and op as the DWDP ranks, on its own full [E, ...] tensors (one buffer). The op's per-expert GEMM reads only the
    rows of that expert's group, so a DWDP rank (experts split over [local, slot]) and this reference add the same
    products in the same order: outputs are comparable bit for bit."""
    units = []
    for mod in model.modules():
        if W13 in getattr(mod, "_parameters", {}) and callable(getattr(mod, "run_moe", None)):
            units.append(install(mod, lambda m=mod: full_sources(m)))
    return units


#: the module MoE.__init__ takes ActivationType from (interface.py @ 581f0712: `from ...utils import
#: ActivationType`; `...utils` is tensorrt_llm._torch.utils under both MoE package roots)
ACTIVATION_ENUM_MODULE = "tensorrt_llm._torch.utils"


def upstream_activation_enum():
    """The installed TensorRT-LLM's ActivationType, or None where it cannot be imported."""
    try:
        return importlib.import_module(ACTIVATION_ENUM_MODULE).ActivationType
    except (ImportError, AttributeError):
        return None


def activation_blocker(act) -> str | None:
    """None when `activation_type` is SwiGLU (or unset), else why the unit cannot compute it.

    Upstream MoE.__init__ stores `self.activation_type = int(activation_type)` (interface.py @ 581f0712),
    so the backend holds an int. Its meaning is the installed enum's, and the value of Swiglu changed between
    versions: cpp/tensorrt_llm/kernels/cutlass_kernels/include/common.h, which tensorrt_llm._torch.utils
    ActivationType mirrors, has Swiglu = 3 @ 8b532363ce56 (`Gelu = 0, Relu, Silu, Swiglu, ...`)
    and Swiglu = 5 @ 3585984b32cd (`InvalidType = 0, Identity = 1, Gelu = 2, ...`). So the int
    is compared with int(ActivationType.Swiglu) of the installed TensorRT-LLM; an enum member is judged by name."""
    if act is None:
        return None
    name = getattr(act, "name", None)
    if isinstance(name, str):  # an enum member (older code, or a caller passing the enum itself)
        return None if name.lower() == "swiglu" else f"activation {name}: the multi_buffer unit computes SwiGLU only"
    enum = upstream_activation_enum()
    if enum is None:
        return (f"activation_type {act!r}: cannot tell whether it is SwiGLU ({ACTIVATION_ENUM_MODULE}.ActivationType "
                "is not importable)")
    if int(act) == int(enum.Swiglu):
        return None
    try:
        label = f"{enum(int(act)).name} ({int(act)})"
    except ValueError:
        label = str(int(act))
    return f"activation {label}: the multi_buffer unit computes SwiGLU only (ActivationType.Swiglu = {int(enum.Swiglu)})"


def blocker(backend: torch.nn.Module, names, device: torch.device) -> str | None:
    """None when multi_buffer can serve this backend here, else why not (the adapter then falls back and logs it)."""
    if not callable(getattr(type(backend), "run_moe", None)):
        return f"{type(backend).__name__} has no run_moe to route through dwdp::grouped_gemm"
    if W13 not in names or W2 not in names:
        return f"multi_buffer needs {W13} and {W2}, the backend has {list(names)}"
    for attr in ("w3_w1_bias", "w2_bias", "swiglu_alpha", "swiglu_beta", "swiglu_limit"):
        if getattr(backend, attr, None) is not None:
            return f"{type(backend).__name__}.{attr} is set: the multi_buffer unit computes plain SwiGLU without bias"
    why = activation_blocker(getattr(backend, "activation_type", None))
    if why is not None:
        return why
    if getattr(backend, "_moe_lora_enabled", False):
        return "MoE LoRA is configured on this layer: not supported by the multi_buffer unit"
    w13 = getattr(backend, W13)
    H, I = w13.shape[2], w13.shape[1] // 2
    fp8 = w13.dtype == FP8_DTYPE
    if fp8:
        if W13_SCALE not in names or W2_SCALE not in names:
            return "FP8 experts without 128x128 block scales (w3_w1_weight_scaling_factor): not supported"
        if I % 128:
            return (f"FP8 block scales with intermediate size {I} (not a multiple of 128): TensorRT-LLM scales each of "
                    "w3 / w1 separately, dwdp::grouped_gemm reads [2I, H] in 128-row blocks")
    elif w13.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return f"expert weights of dtype {w13.dtype}: multi_buffer takes bf16 or FP8 block scales"
    if device.type == "cuda":
        if w13.dtype not in (torch.bfloat16, FP8_DTYPE):
            return f"the CUDA dwdp::grouped_gemm takes bfloat16 or float8_e4m3fn experts, not {w13.dtype}"
        align = 128 if fp8 else 8
        if H % align or I % align:
            return f"hidden {H} and intermediate {I} must be multiples of {align} for the CUDA dwdp::grouped_gemm"
    from ... import ops
    if not ops.available():
        return f"dwdp::grouped_gemm is unavailable: {ops.why_unavailable()}"
    return None
