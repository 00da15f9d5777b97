"""WorkerExtension.update_weights' weight walk, as tensorrt_llm/llmapi/rlhf_utils.py @ c513246cf9aa (the
Barry-Delaney/TensorRT-LLM fork that carries the capability preflight; NVIDIA/TensorRT-LLM @ 65b31db1 runs the same
walk without it: preflight=False):
1. preflight (side-effect free): unless the model carries the latch `first_pre_reload_weights`, every module of
   model.modules() (the root first) that has `check_reload_capability` and is not `_weights_removed` calls it
   ("NotImplementedError: Capability preflight refused a submodule ...; nothing mutated, no cycle abort");
2. destructive walk, inside the abort boundary: every such module's `pre_reload_weights()` ("params re-registered as
   uninitialized storage"), then the latch is set;
3. `model_loader.reload(model, weights, allow_partial_loading=True)`.
An exception in 2-3 aborts the cycle (`_abort_weight_reload_cycle`: the latch is cleared) and is re-raised.
Not modelled: the IPC-handle payload (`weights` is given as a dict), the Ray control decorator, the finalize call."""

_PRE_RELOAD_LATCH_ATTR = "first_pre_reload_weights"


def update_weights(model, model_loader, weights, *, preflight=True):
    if preflight and not hasattr(model, _PRE_RELOAD_LATCH_ATTR):
        for module in model.modules():
            if hasattr(module, "check_reload_capability") and not getattr(module, "_weights_removed", False):
                module.check_reload_capability()
    try:
        if not hasattr(model, _PRE_RELOAD_LATCH_ATTR):
            for module in model.modules():
                if hasattr(module, "pre_reload_weights") and not getattr(module, "_weights_removed", False):
                    module.pre_reload_weights()
            setattr(model, _PRE_RELOAD_LATCH_ATTR, True)
        model_loader.reload(model, weights, allow_partial_loading=True)
    except Exception:
        if hasattr(model, _PRE_RELOAD_LATCH_ATTR):
            delattr(model, _PRE_RELOAD_LATCH_ATTR)
        raise
