"""Patch table: what we change in TensorRT-LLM and where we read it, and the checks of those targets (existence
per module, the report check-trtllm prints, which DWDP lifecycle a version has). Nothing here imports tensorrt_llm
at module level or patches anything (patches.py applies; model_setup.py / moe_layout.py look classes up here).

Each PatchTarget names a module (with the other package paths upstream has kept the same file under), a
dotted attribute in it and what we do. When TensorRT-LLM imports a target module (post-import hook,
integration/hook.py), every target of that module is checked first; a missing required attribute raises
PatchTargetMissing naming the TensorRT-LLM version, the module and the attribute, and nothing of that module
is patched (patches.py). Wrappers keep the original in `__wrapped__`.

Package roots of the MoE files (MOE_ROOTS): `tensorrt_llm._torch.modules.fused_moe` (through the IPC era,
e.g. configurable_moe.py stored id 51886803846) and `tensorrt_llm._torch.moe.fused_moe` (VA era: configurable_moe.py
stored id 67533515591 imports `tensorrt_llm._torch.moe.fused_moe.interface` / `.impl_base` and its sibling
`.activation`, which exists only under that root; setup.py @ 11eba2696184 imports
`tensorrt_llm._torch.moe.fused_moe.activation`). Whether the old root remains as an alias there was not verified,
so both are targets: whichever TensorRT-LLM imports is checked and patched.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

MOE_ROOTS = ("tensorrt_llm._torch.modules.fused_moe", "tensorrt_llm._torch.moe.fused_moe")
MOE_INTERFACE = f"{MOE_ROOTS[0]}.interface"
MODEL_LOADER = "tensorrt_llm._torch.pyexecutor.model_loader"
CUTLASS_MOE = f"{MOE_ROOTS[0]}.fused_moe_cutlass"
LLM_ARGS = "tensorrt_llm.llmapi.llm_args"
CONFIGURABLE_MOE = f"{MOE_ROOTS[0]}.configurable_moe"
DWDP_MODULE = "tensorrt_llm._torch.pyexecutor.dwdp"
PY_EXECUTOR = "tensorrt_llm._torch.pyexecutor.py_executor"
PY_EXECUTOR_CREATOR = "tensorrt_llm._torch.pyexecutor.py_executor_creator"


def _moe_alts(module: str) -> tuple[str, ...]:
    """The same MoE file under the other package roots."""
    leaf = module[len(MOE_ROOTS[0]) + 1:]
    return tuple(f"{r}.{leaf}" for r in MOE_ROOTS[1:])


class PatchTargetMissing(RuntimeError):
    """A patch target is absent from the installed TensorRT-LLM."""

    def __init__(self, version: str, module: str, attribute: str, what: str):
        self.version, self.module, self.attribute = version, module, attribute
        super().__init__(f"TensorRT-LLM {version}: {module} has no attribute {attribute!r} "
                         f"(needed to {what}); this TensorRT-LLM version is not supported by dwdp_trtllm "
                         "- run `dwdp check-trtllm` for the full report")


@dataclass(frozen=True)
class PatchTarget:
    module: str
    attribute: str  # dotted inside the module, e.g. "MoE.__init__"
    what: str
    source: str  # where we read it (file @ commit)
    apply: str | None  # name of the function in this module that applies it; None = existence check only
    optional: bool = False  # may be absent: nothing is patched for it then
    lifecycle: bool = False  # optional target that upstream's DWDP lifecycle needs: missing -> hooks are used

    @property
    def modules(self) -> tuple[str, ...]:
        """`module` and the same file under the other MoE package roots (MOE_ROOTS)."""
        return (self.module, *_moe_alts(self.module)) if self.module.startswith(MOE_ROOTS[0] + ".") else (self.module,)


PATCH_TARGETS: tuple[PatchTarget, ...] = (
    PatchTarget(MOE_INTERFACE, "MoE.__init__",
                "wrap: after the original runs, override expert_size_per_partition, num_slots, slot_start/slot_end "
                "and initial_local_expert_ids from dwdp_trtllm.core.placement (like upstream _init_dwdp_expert_layout)",
                "tensorrt_llm/_torch/modules/fused_moe/interface.py, VA-era version (with _init_dwdp_expert_layout)",
                "_patch_moe_init"),
    PatchTarget(MOE_INTERFACE, "MoE._init_load_balancer",
                "check only: marks the versions whose MoE.__init__ sets the slot attributes we override",
                "tensorrt_llm/_torch/modules/fused_moe/interface.py, VA-era version", None),
    PatchTarget(MOE_INTERFACE, "MoE._init_dwdp_expert_layout",
                "wrap: skipped when the global DWDP manager is ours (HopperDwdpManager has the fields it reads, "
                "num_experts_per_worker / start_expert_id / dwdp_size, from our placement; our MoE.__init__ wrapper "
                "sets the layout right after); optional, but required once our manager is registered globally "
                "(require_layout_wrap)",
                "tensorrt_llm/_torch/moe/fused_moe/interface.py @ 581f0712, the VA-era version with "
                "_init_dwdp_expert_layout",
                "_patch_dwdp_layout", optional=True),
    PatchTarget(MODEL_LOADER, "ModelLoader.load",
                "wrap: after weights are loaded and post_load_weights ran, build our runtime (group, transport, "
                "full-slot buffers, copy plans) and register per-layer prefetch hooks",
                "tensorrt_llm/_torch/pyexecutor/model_loader.py @ 004b733e0ed7", "_patch_model_loader"),
    PatchTarget(MODEL_LOADER, "ModelLoader.reload",
                "wrap (optional): refused for a model dwdp_trtllm set up (its expert Parameters were moved into shared "
                "buffers or rebound to slot views: a weight update would write the wrong memory or fail on shape)",
                "tensorrt_llm/_torch/pyexecutor/model_loader.py @ 004b733e0ed7 (reload(model, weights, "
                "allow_partial_loading=False) -> model.load_weights)", "_patch_model_reload", optional=True),
    PatchTarget(CUTLASS_MOE, "CutlassFusedMoE",
                "check only: the Hopper BF16/FP8 GEMM backend our full-slot weights are bound into",
                "tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py, keyword-run_moe version "
                "(index id 55194060208)", None),
    PatchTarget(CUTLASS_MOE, "CutlassFusedMoE.run_moe",
                "check only (optional): gemm multi_buffer replaces run_moe on each DWDP layer's backend instance "
                "with our execution unit (integration/trtllm/moe_unit.py: dwdp::grouped_gemm over [local, slot]); "
                "absent: multi_buffer is not chosen (composite view or merge, with the reason)",
                "tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py stored id 55194060208 (keyword run_moe, "
                "called by forward_chunk / moe_scheduler.py id 52297624341); tensorrt_llm/_torch/moe/fused_moe/"
                "fused_moe_cutlass.py @ 02320c358831 (run_moe(ctx: MoERunContext, *, workspace))",
                None, optional=True),
    PatchTarget(CONFIGURABLE_MOE, "ConfigurableMoE._should_enable_dwdp",
                "wrap (lifecycle): True for our HopperDwdpManager with the CutlassFusedMoE backend; for any other "
                "manager upstream's gate (CuteDSL + NVFP4 only) decides",
                "tensorrt_llm/_torch/modules/fused_moe/configurable_moe.py @ stored ids 51886803846, 67533515591",
                "_patch_dwdp_gate", optional=True, lifecycle=True),
    PatchTarget(DWDP_MODULE, "set_global_dwdp_manager",
                "call (lifecycle): register our HopperDwdpManager so ConfigurableMoE (get_global_dwdp_manager() at "
                "construction) enables DWDP with it; only where DwdpManager.wait_and_bind exists (VA era)",
                "tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af04538bc, VA era stored id 56230681187",
                "_register_manager", optional=True, lifecycle=True),
    PatchTarget(DWDP_MODULE, "DwdpManager.__init__",
                "wrap (optional): refuse with our message when our HopperDwdpManager is the registered global, i.e. "
                "TensorRT-LLM's own dwdp_config meets engine dwdp_trtllm; upstream's creator would otherwise fail in "
                "DwdpManager.__enter__ with 'DwdpManager already registered globally'",
                "tensorrt_llm/_torch/pyexecutor/dwdp.py VA era stored id 56230681187 (`__enter__` raises when a global "
                "manager is registered); py_executor_creator.py per PR #14453's review-thread diff (DwdpManager(config="
                "llm_args.dwdp_config, ...) then __enter__() when dwdp_config is set)",
                "_patch_upstream_manager", optional=True),
    PatchTarget(PY_EXECUTOR_CREATOR, "create_py_executor",
                "wrap (optional): the serving-feature matrix on its llm_args before anything is built, so a config "
                "that sets dwdp_config beside other refused settings is refused once, naming every one (upstream's "
                "creator builds its DwdpManager from dwdp_config before the model)",
                "tensorrt_llm/_torch/pyexecutor/py_executor_creator.py @ 000429d57d42 (create_py_executor(llm_args, "
                "checkpoint_dir=None, ...)); PR #14453's review-thread diff (DwdpManager built there when dwdp_config "
                "is set)", "_patch_executor_creator", optional=True),
    PatchTarget(PY_EXECUTOR, "PyExecutor.shutdown",
                "wrap (optional): after the original ran, exit our HopperDwdpManager (runtime closed: prefetcher "
                "drained; the transport, which holds the model's local experts, stays open; unregistered); "
                "upstream's shutdown exits only the executor's own manager",
                "tensorrt_llm/_torch/pyexecutor/py_executor.py stored ids 54965565749, 67119085479, 57354091563 "
                "(shutdown ends with `self.dwdp_manager.__exit__(None, None, None)`)",
                "_patch_executor_shutdown", optional=True),
    PatchTarget(DWDP_MODULE, "DwdpManager.wait_and_bind",
                "check only (lifecycle): marks the VA era, whose ConfigurableMoE.forward_impl calls "
                "wait_and_bind(backend, layer_idx); the IPC era (dwdp.py @ 198af04538bc / 753d71ccd9f1) has no "
                "wait_and_bind and binds a weight view in moe_scheduler for CuteDslFusedMoE only",
                "tensorrt_llm/_torch/pyexecutor/dwdp.py VA era stored id 56230681187; configurable_moe.py stored id "
                "67533515591; IPC era: configurable_moe.py id 51886803846, moe_scheduler.py id 52297624341",
                None, optional=True, lifecycle=True),
)


def target_modules() -> tuple[str, ...]:
    return tuple(sorted({m for t in PATCH_TARGETS for m in t.modules}))


def trtllm_version() -> str:
    mod = sys.modules.get("tensorrt_llm")
    v = getattr(mod, "__version__", None) if mod is not None else None
    if v:
        return str(v)
    try:
        from importlib.metadata import version
        return version("tensorrt_llm")
    except Exception:
        return "unknown"


def import_trtllm() -> None:
    """Import the installed tensorrt_llm package (heavy; `dwdp check-trtllm` exists to check it)."""
    import tensorrt_llm  # noqa: F401


def has_upstream_dwdp_config() -> bool:
    """TensorRT-LLM's own DWDP config exists: `dwdp_config` in TorchLlmArgs.model_fields (llm_args.py @
    0004396720054fd8)."""
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
    return "dwdp_config" in TorchLlmArgs.model_fields


def resolve(module: ModuleType, attribute: str):
    obj = module
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def verify(module: ModuleType) -> list[PatchTarget]:
    """The targets of `module`, each checked to exist; raises PatchTargetMissing on the first missing one."""
    name = module.__name__
    mine = [t for t in PATCH_TARGETS if name in t.modules]
    present = []
    for t in mine:
        try:
            resolve(module, t.attribute)
        except AttributeError:
            if t.optional:
                continue  # this version lacks it: nothing to patch (a lifecycle piece: the hook path is used)
            raise PatchTargetMissing(trtllm_version(), name, t.attribute, t.what) from None
        present.append(t)
    return present


def lifecycle_report(rows) -> tuple[str, str]:
    """('upstream' | 'hooks', why) from report() rows: upstream's lifecycle needs every lifecycle target."""
    opt = [(t, st, m) for t, st, m in rows if t.lifecycle]
    missing = [f"{m}.{t.attribute} ({st})" for t, st, m in opt if st != "present"]
    if not missing:
        return "upstream", ("ConfigurableMoE has the DWDP gate and pyexecutor.dwdp the global manager and "
                            "DwdpManager.wait_and_bind: TensorRT-LLM's own call sites (ConfigurableMoE.forward_impl: "
                            "wait_and_bind, record_compute_and_prefetch_next) drive our HopperDwdpManager")
    return "hooks", "no upstream DWDP lifecycle: " + "; ".join(missing) + " -> MoE forward hooks drive the same manager"


def _import_first(names, imp):
    """(module name, module or None, error): the first of `names` that imports; a name whose own package is
    absent is skipped, any other import error is the answer."""
    err = None
    for name in names:
        try:
            return name, imp(name), None
        except ModuleNotFoundError as e:  # this root does not exist here: try the next one
            if e.name and (name == e.name or name.startswith(e.name + ".")):
                err = err or e
                continue
            return name, None, e
        except Exception as e:  # noqa: BLE001 - reported, not raised
            return name, None, e
    return names[0], None, err


def report(import_module: Callable[[str], ModuleType] | None = None) -> list[tuple[PatchTarget, str, str]]:
    """(target, 'present' | 'missing' | 'module not importable: ...', module checked) for check-trtllm
    (imports the modules; for MoE files the first package root that exists)."""
    import importlib
    imp = import_module or importlib.import_module
    rows = []
    for t in PATCH_TARGETS:
        name, mod, err = _import_first(t.modules, imp)
        if mod is None:
            rows.append((t, f"module not importable: {type(err).__name__}: {err}", name))
            continue
        try:
            resolve(mod, t.attribute)
            rows.append((t, "present", name))
        except AttributeError:
            rows.append((t, "missing", name))
    return rows


def upstream_class(leaf: str, name: str, near: str | None = None) -> tuple[type, ...]:
    """Class `name` of MoE file `leaf` ("interface", "fused_moe_cutlass") under every package root TensorRT-LLM
    has loaded (or under the root of module `near`); imports the file from a root whose interface is loaded."""
    import importlib
    roots = [near.rsplit(".", 1)[0]] if near else [r for r in MOE_ROOTS if f"{r}.interface" in sys.modules]
    found = []
    for r in roots:
        cls = getattr(importlib.import_module(f"{r}.{leaf}"), name, None)
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    if not found:
        raise RuntimeError(f"dwdp_trtllm: no {leaf}.{name} under {' or '.join(roots or MOE_ROOTS)} "
                           "(TensorRT-LLM's MoE package was not imported?)")
    return tuple(found)


#: MoE backend classes DWDP was verified with (file leaf, class name), matched by exact class: upstream PR 18409
#: ("declare MoE backend capabilities instead of checking exact classes") lets a subclass declare capabilities, so a
#: subclass of one of these (e.g. CuteDslB12xFusedMoE, an NVFP4 CutlassFusedMoE subclass on SM120) is refused by name
VERIFIED_BACKENDS = (("fused_moe_cutlass", "CutlassFusedMoE"),)


def refuse_unverified_backend(backends, near: str | None = None) -> None:
    """RuntimeError naming the first backend whose class is not exactly one of VERIFIED_BACKENDS (under the MoE package
    root of module `near`, else every root TensorRT-LLM loaded)."""
    verified = tuple(c for leaf, name in VERIFIED_BACKENDS for c in upstream_class(leaf, name, near=near))
    for b in backends:
        if type(b) not in verified:
            cls = type(b)
            raise RuntimeError(f"dwdp_trtllm: MoE backend {cls.__module__}.{cls.__qualname__} is not one DWDP was "
                               f"verified with (exactly {', '.join(n for _, n in VERIFIED_BACKENDS)}; a subclass is "
                               "refused too: it may read the expert weights DWDP binds differently); set "
                               "moe_config: {backend: CUTLASS} on the DWDP context servers")
