"""Setup after TensorRT-LLM loaded the weights (wrapped ModelLoader.load), for the dwdp_trtllm engine.

Steps (every context rank of a DWDP group runs them in the same order):
 1. check: every expert-weight owner is exactly a verified backend class (targets.refuse_unverified_backend); the
    server's LLM args were checked before the model was built (serving_features, from patches' ModelLoader.load wrap);
 2. group: only the context ranks form it (integration/group.py, Create_group like upstream);
 3. AdapterRuntime (integration/adapter.py): transport, composite view / multi_buffer / merge slots (gemm_choice.choose_gemm
    logs which and why), CopyScheduler, Prefetcher: the DWDP core the embedded engine uses; with multi_buffer each
    DWDP backend's run_moe becomes our execution unit (moe_unit.py: dwdp::grouped_gemm over [local, slot]);
 4. promotion of the ConfigurableMoE wrapper AND its backend to the full expert range, like upstream
    fixup_moe_backends (tensorrt_llm/_torch/modules/dwdp/setup.py, stored id 56165781406: "ConfigurableMoE
    has its own ep_size, slot_start, etc. that are used in its forward path");
 5. driver: upstream's lifecycle when ConfigurableMoE enabled DWDP with our manager (it then calls
    wait_and_bind / record_compute_and_prefetch_next itself), else MoE forward hooks (integration/moe_hooks.py).
"""
from __future__ import annotations

import os
import sys

import torch

from ...core.transport import make_transport
from ..adapter import AdapterRuntime
from ..gemm_choice import transport_for
from ..group import dwdp_process_group
from ..moe_hooks import MoeHooks, route_precomputed
from ..process_role import engine_for_process, global_rank, integration_config, process_manager
from . import moe_unit
from .targets import refuse_unverified_backend

#: routed-expert tensors handled per expert, by TensorRT-LLM attribute name (BF16, FP8 block scales);
#: *_weight_scale are NVFP4 names (pyexecutor/dwdp.py @ 753d71cc QUANT_SCALE_PARAMS), bound if present
WEIGHT_NAMES = ("w3_w1_weight", "w2_weight", "w3_w1_weight_scaling_factor", "w2_weight_scaling_factor",
                "w3_w1_weight_scale", "w2_weight_scale")
#: layout fields upstream fixup_moe_backends sets on wrapper and backend (setup.py, stored id 56165781406)
PROMOTED = ("ep_size", "ep_rank", "expert_size_per_partition", "slot_start", "slot_end", "num_slots",
            "initial_local_expert_ids", "initial_global_assignments")


def _moe_modules(model):
    from .targets import upstream_class
    MoE = upstream_class("interface", "MoE")  # whichever MoE package root TensorRT-LLM loaded
    outer = []
    for name, mod in model.named_modules():
        if isinstance(mod, MoE) and hasattr(mod, "_dwdp_trtllm") and not any(
                name.startswith(o + ".") for o, _ in outer):
            outer.append((name, mod))
    return [m for _, m in outer]


def _weight_owner(moe):
    for mod in moe.modules():
        if "w3_w1_weight" in mod._parameters:
            return mod
    raise RuntimeError(f"{type(moe).__name__}: no module owns w3_w1_weight; unsupported MoE backend layout")


def loader_args(loader):
    """llm_args (ModelLoader @ 004b733e) or pytorch_backend_config (ModelLoader @ b51992a3, no llm_args)."""
    for name in ("llm_args", "pytorch_backend_config"):
        args = getattr(loader, name, None)
        if args is not None:
            return args
    raise RuntimeError(f"{type(loader).__name__} has neither llm_args nor pytorch_backend_config; this "
                       "TensorRT-LLM version is not supported by dwdp_trtllm (run `dwdp check-trtllm`)")


def checkpoint_mtp_layers(checkpoint_dir) -> int | None:
    """The checkpoint's MTP layer count (config.json num_nextn_predict_layers, absent: 0) for the serving-feature
    check's speculative mode (serving_features.speculative_mode); None where it cannot be read here (an HF name, no
    config.json, not JSON): upstream then decides as for one layer."""
    import json
    from pathlib import Path

    try:
        data = json.loads((Path(checkpoint_dir) / "config.json").read_text(encoding="utf-8"))
    except (TypeError, OSError, ValueError, RecursionError):
        return None
    n = data.get("num_nextn_predict_layers", 0) if isinstance(data, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


#: per-expert activation constants (non-persistent buffers) that install_activation_params writes
#: (tensorrt_llm/_torch/moe/fused_moe/activation.py @ 1262edbc3809)
ACTIVATION_SLOTS = ("act_alpha", "act_beta", "act_clamp")


def _activation_installer(backend):
    """install_activation_params of the backend's own MoE package when the backend has an `activation`, else None."""
    if getattr(backend, "activation", None) is None:
        return None
    act = sys.modules.get(type(backend).__module__.rsplit(".", 1)[0] + ".activation")
    return getattr(act, "install_activation_params", None)


def check_per_expert(owners, names, n_local: int) -> None:
    """Every per-expert tensor of a backend ([n_local, ...] parameter or buffer) must be one we move (names), or an
    activation constant that promote() re-materializes for the full range; anything else is refused."""
    for o in owners:
        known = set(names) | (set(ACTIVATION_SLOTS) if _activation_installer(o) is not None else set())
        for pname, p in list(o.named_parameters(recurse=False)) + list(o.named_buffers(recurse=False)):
            if p is not None and p.dim() > 0 and p.shape[0] == n_local and pname not in known:
                raise RuntimeError(f"{type(o).__name__}.{pname} is per-expert ({tuple(p.shape)}) but not handled by "
                                   "dwdp_trtllm; unsupported quantisation for this integration")


def promote(modules, num_experts: int, *, backends=()) -> None:
    """Every module (wrapper and backend) now sees all experts as local (ep_size 1, slots 0..E). Then, like
    upstream fixup_moe_backends (setup.py @ 11eba2696184), each backend in `backends` whose
    `activation` is set gets its per-expert activation constants (ACTIVATION_SLOTS) re-materialized for the new
    expert_size_per_partition by `install_activation_params` of its package's `activation` module, where that
    module exists (tensorrt_llm._torch.moe.fused_moe.activation); plain SwiGLU carries none."""
    E = num_experts
    values = {"ep_size": 1, "ep_rank": 0, "expert_size_per_partition": E, "slot_start": 0, "slot_end": E,
              "num_slots": E, "initial_local_expert_ids": list(range(E)), "initial_global_assignments": list(range(E))}
    for m in modules:
        for k in PROMOTED:
            if k in ("initial_global_assignments",) and not hasattr(m, k):
                continue  # older versions have no global assignments (used by EPLB only)
            setattr(m, k, values[k])
    for b in backends:
        install = _activation_installer(b)
        if install is not None:
            install(b)


def weight_update_refusal(gemm: str, where: str) -> str:
    """The refusal of a weight update on a model DWDP set up, at `where` (the preflight, the walk or the reload)."""
    return (f"dwdp_trtllm: {where} refused: DWDP (gemm {gemm}) moved this rank's expert weights into shared buffers or "
            "rebound them to slot views, so a weight update would write the wrong memory; restart the servers with the "
            "new checkpoint (or run them with engine: upstream / without DWDP)")


def _raiser(message: str):
    def refuse(*_args, **_kwargs):
        raise NotImplementedError(message)
    return refuse


def refuse_weight_updates(model, owners, gemm: str) -> None:
    """Refuse a weight update before any weight is touched. Upstream's update path (tensorrt_llm/llmapi/rlhf_utils.py
    @ c513246cf9aa, WorkerExtension.update_weights) first asks every module of model.modules() (the root first) that has
    `check_reload_capability` (side-effect free; NotImplementedError = "nothing mutated"), then walks the same modules'
    destructive `pre_reload_weights` (MoE backends re-register their expert Parameters as new storage) and only then
    calls ModelLoader.reload; versions without the preflight (@ 65b31db1) start with the walk. Both methods are set on
    the root model, which either loop reaches first, and on every expert-weight owner; the ModelLoader.reload wrap
    (patches.py) stays the last refusal."""
    for m in (model, *owners):
        m.check_reload_capability = _raiser(weight_update_refusal(gemm, "weight update (check_reload_capability)"))
        m.pre_reload_weights = _raiser(weight_update_refusal(gemm, "weight update (pre_reload_weights)"))


def _lifecycle(moes, manager) -> str:
    """'upstream' when every MoE enabled DWDP with our manager (ConfigurableMoE.forward_impl will call it),
    'hooks' when none did; a mix is refused."""
    on = [bool(getattr(m, "enable_dwdp", False)) and getattr(m, "dwdp_manager", None) is manager for m in moes]
    if all(on):
        return "upstream"
    if not any(on):
        return "hooks"
    raise RuntimeError(f"dwdp_trtllm: {sum(on)} of {len(on)} MoE layers enabled upstream's DWDP lifecycle; "
                       "all or none must (mixed MoE backends?)")


def setup_after_load(model) -> None:
    if engine_for_process() != "dwdp_trtllm":
        return
    icfg = integration_config()
    cfg = icfg.dwdp
    moes = _moe_modules(model)
    if not moes:
        raise RuntimeError("dwdp_trtllm: no MoE layer received our layout (MoE.__init__ patch did not run?)")
    owners = [_weight_owner(m) for m in moes]
    refuse_unverified_backend(owners)
    meta = moes[0]._dwdp_trtllm
    dwdp_rank, placement = meta["dwdp_rank"], meta["placement"]
    E, n_local = placement.num_experts, len(placement.local_experts[dwdp_rank])
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    names = [n for n in WEIGHT_NAMES if getattr(owners[0], n, None) is not None]
    check_per_expert(owners, names, n_local)

    manager = process_manager()
    manager.check_free()  # an earlier model's runtime still open: refused before anything is allocated for this one
    group, tag = dwdp_process_group(cfg, global_rank())
    # the gemm the integration YAML names, None when it names none (then the adapter's measured default decides)
    transport_kind = transport_for(cfg.transport, device_type=device.type, gemm_requested=icfg.gemm_requested)
    transport = make_transport(transport_kind, group=group, dwdp_rank=dwdp_rank, dwdp_size=cfg.dwdp_size,
                               device=device, tag=tag)
    rt = AdapterRuntime(owners=owners, names=names, placement=placement, dwdp_rank=dwdp_rank, cfg=cfg,
                        transport=transport, device=device, blocker=moe_unit.blocker(owners[0], names, device),
                        gemm_requested=icfg.gemm_requested, close_timeout_s=icfg.shutdown_timeout_s,
                        group_label=f"DWDP group {global_rank() // cfg.dwdp_size} ({tag})", owns_group=True)
    units = [moe_unit.install(o, lambda p=p: rt.bound_sources(p)) for p, o in enumerate(owners)] \
        if rt.gemm == "multi_buffer" else []
    promote([m for pair in zip(moes, owners) for m in dict.fromkeys(pair)], E, backends=owners)

    layer_ids = [getattr(m, "layer_idx", None) for m in moes]
    if None in layer_ids or len(set(layer_ids)) != len(layer_ids):
        layer_ids = list(range(len(moes)))  # hooks only: positions serve as ids
    lifecycle = _lifecycle(moes, manager)
    try:
        manager.attach(rt, layer_ids, lifecycle)
    except BaseException:
        rt.close()  # not attached: nobody else would close it
        raise
    hooks = MoeHooks(manager, moes, owners, layer_ids).attach() if lifecycle == "hooks" else None
    refuse_weight_updates(model, owners, rt.gemm)
    route_precomputed(manager, moes, owners, layer_ids)  # bypasses forward_impl and the hooks: bound here (moe_hooks)
    model._dwdp_trtllm_runtime = {"transport": transport, "runtime": rt, "manager": manager, "hooks": hooks,
                                  "lifecycle": lifecycle, "gemm": rt.gemm, "gemm_reason": rt.reason, "units": units,
                                  "pid": os.getpid(), "dwdp_rank": dwdp_rank}
