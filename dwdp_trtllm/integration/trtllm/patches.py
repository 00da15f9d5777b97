"""What each patch of the table (targets.py) does to TensorRT-LLM, and the post-import callback that applies them.

The process's engine is decided first (integration/process_role.py): only a dwdp_trtllm process verifies and
patches; any other process patches nothing and only logs a missing target. Each apply function below is named by
its PatchTarget.apply; wrappers keep the original in `__wrapped__` and are idempotent (wrap_method).
"""
from __future__ import annotations

import functools
import logging
import sys
from types import ModuleType
from typing import Callable

from ..process_role import close_process_manager, engine_for_process, process_manager
from ..serving_features import BOTH_ENGINES
from .targets import DWDP_MODULE, MOE_ROOTS, PATCH_TARGETS, PatchTargetMissing, refuse_unverified_backend, resolve, \
    trtllm_version, verify

log = logging.getLogger("dwdp_trtllm.integration")


def wrap_method(owner: type, name: str, make: Callable[[Callable], Callable]) -> None:
    """Replace owner.name with make(original); idempotent (a wrapped method is left alone)."""
    orig = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
    if getattr(orig, "_dwdp_trtllm_patched", False):
        return
    new = functools.wraps(orig)(make(orig))
    new._dwdp_trtllm_patched = True
    setattr(owner, name, new)


def our_global_manager():
    """Our HopperDwdpManager when it is upstream's registered global DWDP manager (VA era), else None."""
    dwdp = sys.modules.get(DWDP_MODULE)
    mgr = dwdp.get_global_dwdp_manager() if dwdp is not None and hasattr(dwdp, "get_global_dwdp_manager") else None
    return mgr if getattr(mgr, "is_dwdp_trtllm", False) else None


def _patch_moe_init(module: ModuleType) -> None:
    """MoE.__init__ (keyword-only: num_experts=..., interface.py @ 581f0712): the rank's layout is computed
    (and checked: moe_layout, its one owner) before the original runs, and handed to our registered manager, whose
    layout attributes upstream's _init_dwdp_expert_layout would read (our wrap skips that method while ours is
    registered); after the original, override_layout sets the same layout on the instance."""
    from .moe_layout import override_layout, rank_layout

    def make(orig):
        def __init__(self, *args, **kwargs):
            mgr = our_global_manager()
            layout = rank_layout(kwargs["num_experts"]) if mgr is not None and "num_experts" in kwargs else None
            if layout is not None:
                mgr.use_layout(layout)
            orig(self, *args, **kwargs)
            override_layout(self, layout)
        return __init__
    wrap_method(module.MoE, "__init__", make)


def _patch_model_loader(module: ModuleType) -> None:
    """ModelLoader.load (model_loader.py @ 004b733e0ed7: builds the model, then loads its weights; called by
    PyTorchModelEngine.__init__, and again for a two-model draft engine): first the serving-feature matrix on this
    loader's LLM args (serving_features.refuse_unsupported: every refused setting in one message, before the model
    is built), then our manager registered, the original, and our runtime set up on the loaded model."""
    from ..serving_features import refuse_unsupported
    from .model_setup import checkpoint_mtp_layers, loader_args, setup_after_load

    def make(orig):
        def load(self, *args, **kwargs):
            # before any weight is loaded (or the model built); the loader's own spec_config / max_num_tokens win, and
            # the checkpoint's MTP layer count decides MTP's mode as upstream's spec_dec_mode does (load(checkpoint_dir,
            # checkpoint_loader), model_loader.py @ 004b733e0ed7)
            ckpt = args[0] if args else kwargs.get("checkpoint_dir")
            refuse_unsupported(loader_args(self), {"speculative_config": getattr(self, "spec_config", None),
                                                   "max_num_tokens": getattr(self, "max_num_tokens", None),
                                                   "checkpoint_mtp_layers": checkpoint_mtp_layers(ckpt)})
            register_process_manager()  # before the model (its ConfigurableMoEs read the global manager) is built
            result = orig(self, *args, **kwargs)
            model = result[0] if isinstance(result, tuple) else result
            setup_after_load(model)
            return result
        return load
    wrap_method(module.ModelLoader, "load", make)


def _patch_model_reload(module: ModuleType) -> None:
    """ModelLoader.reload: the last refusal of a weight update on a model we set up (upstream's update path is refused
    earlier, before its destructive walk: model_setup.refuse_weight_updates)."""
    from .model_setup import weight_update_refusal

    def make(orig):
        def reload(self, *args, **kwargs):
            model = args[0] if args else kwargs.get("model")
            info = getattr(model, "_dwdp_trtllm_runtime", None)
            if info is not None:
                raise RuntimeError(weight_update_refusal(info["gemm"], "ModelLoader.reload"))
            return orig(self, *args, **kwargs)
        return reload
    wrap_method(module.ModelLoader, "reload", make)


def _patch_dwdp_layout(module: ModuleType) -> None:
    """MoE._init_dwdp_expert_layout (VA era, interface.py @ 581f0712) runs last in MoE.__init__ and, when
    `get_global_dwdp_manager()` is set, reads manager.num_experts_per_worker / start_expert_id / dwdp_size. With our
    HopperDwdpManager registered it is skipped: our MoE.__init__ wrapper (override_layout, the counterpart of this
    method) sets the layout from our placement right after. Any other manager: the original runs."""

    def make(orig):
        def _init_dwdp_expert_layout(self):
            if our_global_manager() is not None:
                return
            return orig(self)
        return _init_dwdp_expert_layout
    wrap_method(module.MoE, "_init_dwdp_expert_layout", make)


def _patch_dwdp_gate(module: ModuleType) -> None:
    """ConfigurableMoE._should_enable_dwdp: for our HopperDwdpManager (what `get_global_dwdp_manager()` returned
    when the layer was built, stored id 51886803846 / 67533515591) True when the backend's class is exactly one DWDP
    was verified with (targets.VERIFIED_BACKENDS: CutlassFusedMoE, BF16 / FP8 block scales on sm_90); any other
    backend, a subclass included, is refused by name while the model is built, before its weights load (upstream PR
    18409 moved its own gates from exact classes to declared capabilities, so a subclass may now declare what it
    never showed us). For any other manager the original gate (CuteDSL + NVFP4 only) decides. ConfigurableMoE only
    asks the gate when a global manager is set, so with none nothing changes."""

    def make(orig):
        def _should_enable_dwdp(self):
            if not getattr(getattr(self, "dwdp_manager", None), "is_dwdp_trtllm", False):
                return orig(self)
            refuse_unverified_backend([getattr(self, "backend", None)], near=module.__name__)
            return True
        return _should_enable_dwdp
    wrap_method(module.ConfigurableMoE, "_should_enable_dwdp", make)


def _patch_executor_creator(module: ModuleType) -> None:
    """create_py_executor(llm_args, ...) (py_executor_creator.py @ 000429d57d42: llm_args first;
    the DWDP-era creator builds upstream's DwdpManager from llm_args.dwdp_config before any model, PR #14453's
    review-thread diff): the serving-feature matrix on llm_args first, so that a config with dwdp_config and other
    refused settings is refused in one message naming all of them, before upstream's manager or any model is built.
    ModelLoader.load checks again with the loader's own values (a draft engine, versions without this function)."""
    from ..serving_features import refuse_unsupported

    def make(orig):
        def create_py_executor(*args, **kwargs):
            refuse_unsupported(args[0] if args else kwargs.get("llm_args"))
            return orig(*args, **kwargs)
        return create_py_executor
    wrap_method(module, "create_py_executor", make)


def _patch_upstream_manager(module: ModuleType) -> None:
    def make(orig):
        def __init__(self, *args, **kwargs):
            if our_global_manager() is not None:
                raise RuntimeError(BOTH_ENGINES)
            return orig(self, *args, **kwargs)
        return __init__
    wrap_method(module.DwdpManager, "__init__", make)


def _patch_executor_shutdown(module: ModuleType) -> None:

    def make(orig):
        def shutdown(self, *args, **kwargs):
            result = orig(self, *args, **kwargs)
            close_process_manager(self)  # a hung executor (or a live worker thread) closes locally
            return result
        return shutdown
    wrap_method(module.PyExecutor, "shutdown", make)


def register_process_manager(module: ModuleType | None = None) -> None:
    """Make the process's HopperDwdpManager upstream's registered global manager, where upstream's ConfigurableMoE
    calls wait_and_bind (VA era: pyexecutor.dwdp imported, DwdpManager.wait_and_bind exists); in the IPC era it would
    be asked to record layers it never bound, so nothing is registered there.

    Called when pyexecutor.dwdp is imported and again before every ModelLoader.load, mirroring upstream's lifecycle
    of its own manager: each executor's construction builds and enters a new DwdpManager (registering it) before the
    model is built (py_executor_creator.py diff in PR #14453's review thread: `DwdpManager(config=..., dist=...,
    mapping=...)`, `dwdp_manager.__enter__()`; dwdp.py VA era, stored id 56230681187: `__enter__` registers), and
    PyExecutor.shutdown exits it (py_executor.py stored ids 54965565749, 67119085479, 57354091563: `__exit__` =
    cleanup + unregister). Ours is exited at shutdown too (_patch_executor_shutdown), so a second model in the same
    process gets a fresh manager (process_role.process_manager) registered here, not the hooks path. A manager of
    upstream's own registered at that point means TensorRT-LLM's dwdp_config is set as well: refused (BOTH_ENGINES)."""
    module = module or sys.modules.get(DWDP_MODULE)
    if module is None or not hasattr(getattr(module, "DwdpManager", None), "wait_and_bind"):
        return
    mgr, current = process_manager(), module.get_global_dwdp_manager()
    if current is mgr:
        return
    if current is not None:
        raise RuntimeError(BOTH_ENGINES)
    mgr.register_in(module.get_global_dwdp_manager, module.set_global_dwdp_manager)


def _register_manager(module: ModuleType) -> None:
    """At import of pyexecutor.dwdp: register our manager (register_process_manager) and, where that happened (VA
    era), require the layout wrap of every MoE interface already imported."""
    register_process_manager(module)
    if our_global_manager() is None:
        return
    for root in MOE_ROOTS:  # MoE interfaces imported before this module: the layout wrap is now required
        iface = sys.modules.get(f"{root}.interface")
        if iface is not None:
            require_layout_wrap(iface)


def require_layout_wrap(interface: ModuleType) -> None:
    """With our manager registered globally, the optional MoE._init_dwdp_expert_layout target is required: upstream's
    MoE.__init__ reads the layout from whatever manager is registered, and our wrap is what keeps our placement the
    one that decides (a renamed or moved override would otherwise be skipped silently)."""
    t = next(t for t in PATCH_TARGETS if t.attribute == "MoE._init_dwdp_expert_layout")
    try:
        fn = resolve(interface, t.attribute)
    except AttributeError:
        fn = None
    if not getattr(fn, "_dwdp_trtllm_patched", False):
        raise PatchTargetMissing(trtllm_version(), interface.__name__, t.attribute,
                                 t.what + "; required because pyexecutor.dwdp has the VA-era lifecycle and our "
                                 "HopperDwdpManager is registered as the global DWDP manager")


def on_target_imported(module: ModuleType) -> None:
    """Post-import callback. The process's engine is decided first: only a dwdp_trtllm process verifies the
    targets of `module` (PatchTargetMissing on a missing required one) and applies them. Any other process
    (engine upstream, only DWDP_TRTLLM=1, a generation rank) patches nothing, so a target only our engine needs
    must not stop it: a missing one is logged as a warning (`dwdp check-trtllm` gives the full report)."""

    engine = engine_for_process()
    if engine != "dwdp_trtllm":
        try:
            verify(module)
        except PatchTargetMissing as e:
            log.warning("dwdp_trtllm: %s; this process runs engine %r and patches nothing, so it continues", e, engine)
        return
    for t in verify(module):
        if t.apply:
            globals()[t.apply](module)
    if module.__name__.endswith(".interface") and our_global_manager() is not None:
        require_layout_wrap(module)
