"""Which expert path (gemm) and which transport the TensorRT-LLM adapter uses, and why (no tensorrt_llm import).

Pure decisions from the config's request, the device, the transport kind and the placement: transport_for (the
transport `auto` becomes), choose_gemm (the path tried first, its fallbacks, the reason the log and
`gemm_reason` carry). The default path when the config names none is moe_evidence.default_gemm, asked with
expert_weight_dtype / device_sm of the tensors and device at hand. AdapterRuntime (adapter.py) builds what is chosen.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..core.composite_slots import CompositeUnsupported, local_run
from ..core.placement import ExpertPlacement
from .moe_evidence import fp8_sm90_reason


def is_scale(name: str) -> bool:
    """FP8 block scales / NVFP4 scales: small, not granularity-sized, kept in plain full slots."""
    return name.endswith("_scale") or name.endswith("_scaling_factor")


VMM_TRANSPORTS = ("vmm_fd", "vmm_fabric")
#: the gemms whose path (or first fallback) maps the local experts beside the slot: they need cuMem allocations
VMM_GEMMS = ("composite_view", "multi_buffer")


def transport_for(kind: str, *, device_type: str, gemm_requested: str | None) -> str:
    """The transport the TensorRT-LLM adapter opens for the config's `kind` (the one place this is decided).

    gemm_requested: the gemm the integration config names (settings.IntegrationConfig.gemm_requested), None when it
    names none. `auto` on CUDA becomes vmm_fd when the gemm tried first is composite_view or multi_buffer, or when
    the config names no gemm (the default, moe_evidence.default_gemm, is one of those two): the composite view
    maps the local experts beside the slot, so they must be cuMem allocations, and it is multi_buffer's fallback where
    the unit is refused (choose_gemm). Otherwise (`auto` off CUDA, or merge / reference named) `auto` is left to
    transport.make_transport; a named kind is always kept."""
    if kind == "auto" and device_type == "cuda" and (gemm_requested is None or gemm_requested in VMM_GEMMS):
        return "vmm_fd"
    return kind


MULTI_BUFFER_WHAT = "dwdp::grouped_gemm reads [local, slot] in place (no local copy)"
MERGE_WHAT = "merge: local experts copied into a full [E, ...] slot every layer"


#: AdapterRuntime's blocker where the host has no multi_buffer execution unit
NO_UNIT = "no multi_buffer execution unit on this host"


def _composite_blocker(want: str, device_type: str, transport_kind: str, placement: ExpertPlacement,
                       rank: int, default: bool = False) -> str | None:
    """Why the composite view cannot be built here, or None (off CUDA: only its test stand-in, for a request)."""
    if device_type != "cuda":
        return None if want == "composite_view" and not default else \
            "composite_view needs CUDA VMM allocations; this device is cpu"
    if transport_kind not in VMM_TRANSPORTS:
        return f"composite_view needs transport vmm_fd or vmm_fabric, got {transport_kind}"
    try:
        local_run(placement, rank)
    except CompositeUnsupported as e:
        return str(e)
    return None


def expert_weight_dtype(weight_dtype: torch.dtype, names: Sequence[str]) -> str:
    """The experts' DwdpConfig weight_dtype: 'fp8' for e4m3 weights with block scales (*_scaling_factor tensors),
    else 'bf16' (moe_evidence.default_gemm's terms)."""
    return "fp8" if weight_dtype == torch.float8_e4m3fn and any(is_scale(n) for n in names) else "bf16"


def device_sm(device: torch.device, capability: tuple[int, int] | None = None) -> int | None:
    """The device's compute capability as major * 10 + minor (capability: given, else read from CUDA); None off CUDA."""
    if device.type != "cuda":
        return None
    major, minor = capability or torch.cuda.get_device_capability(device)
    return major * 10 + minor


def choose_gemm(want: str, *, device_type: str, transport_kind: str, placement: ExpertPlacement, rank: int,
                blocker: str | None, composite_error: str | None = None, fp8_sm90: bool = False,
                default: bool = False, device_name: str | None = None) -> tuple[str, str]:
    """(gemm, reason) for the TensorRT-LLM host; the reason goes to the log, `gemm_reason` and check output.

    `gemm: multi_buffer` (moe_evidence.default_gemm for FP8 block scales on sm_90) asks for the multi_buffer unit (dwdp::grouped_gemm over
    [local, slot]) first, then the composite view, then merge; any other request (composite_view, BF16's default)
    the composite view (stock kernel, nothing copied locally) first, then the unit, then merge; `gemm: merge` merge.
    On CPU the composite view exists only as the test stand-in, used when requested explicitly. blocker: None when
    the host's multi_buffer unit can serve these owners, else why not. composite_error: the composite view was
    chosen but could not be built (why); the choice is made again without it, and the reason keeps everything said
    before. fp8_sm90: FP8 block-scale experts on sm_90 (moe_evidence.measured_case): a multi_buffer choice names the
    measurement it rests on (moe_evidence.fp8_sm90_reason). default: `want` is moe_evidence.default_gemm (the
    integration config names no gemm), not a request; the reason says so and on CPU the stand-in is not used.
    device_name: the GPU's name (torch.cuda.get_device_name): the FP8 reason says whether it is the GPU measured."""
    asked = "default (the integration config names no gemm)" if default else "requested"
    if want == "merge":
        return "merge", f"gemm: merge {asked}"
    if want == "multi_buffer" and blocker is None:
        if fp8_sm90:
            why = fp8_sm90_reason(device_name=device_name)
            return "multi_buffer", f"gemm: multi_buffer {asked}; {why}; {MULTI_BUFFER_WHAT}"
        return "multi_buffer", f"gemm: multi_buffer {asked}; {MULTI_BUFFER_WHAT}"
    note = {"multi_buffer": f"gemm: multi_buffer {asked} but not possible ({blocker}); ",
            "reference": "gemm: reference is the embedded engine's per-expert loop, not a TensorRT-LLM path; "}.get(
        want, f"gemm: {want} {asked}; " if default else "")
    why = composite_error or _composite_blocker(want, device_type, transport_kind, placement, rank, default)
    if why is None:
        if device_type != "cuda":  # requested explicitly: the test stand-in (composite_cpu.py)
            return "composite_view", note + ("cpu stand-in for tests: slot runs and copy plan of the composite view, "
                                             "the [E, ...] tensor assembled per bind (no VMM on cpu)")
        return "composite_view", note + "local experts mapped beside the slot (no local copy)"
    note += f"composite view not possible ({why}); "
    if blocker is None:
        return "multi_buffer", note + f"multi_buffer: {MULTI_BUFFER_WHAT}"
    if want != "multi_buffer":  # a refused multi_buffer request is in the note already
        note += f"multi_buffer not possible ({blocker}); "
    return "merge", note + MERGE_WHAT
