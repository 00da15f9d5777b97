"""Hook driver for TensorRT-LLM versions without upstream's DWDP lifecycle (no tensorrt_llm import).

TensorRT-LLM's engine calls `model.forward(**kwargs)` directly (PyTorchModelEngine.model_forward, stored
id 5682132957; the decoder runner's model_forward, stored id 69864124258), so a forward pre-hook on the
model never fires. Only the MoE modules are called through nn.Module.__call__ (Deepseekv3MoE:
`self.experts(...)`, stored ids 2891600299, 3518086746), so all hooks live there:

    MoE p pre-hook:   manager.wait_and_bind(owner_p, layer_id_p)   (p == 0: the forward-start check inside)
    MoE p post-hook:  manager.record_compute_and_prefetch_next(layer_id_p)

which are exactly the calls upstream's ConfigurableMoE.forward_impl makes in versions that have the
lifecycle (see hopper_manager.py).

refuse_precomputed_route (both lifecycles): upstream's newer ConfigurableMoE.forward_precomputed_route runs a top-k
computed elsewhere through the scheduler, bypassing forward_impl (where the lifecycle's wait_and_bind / record calls
are) and nn.Module.__call__ (where the hooks are). On a DWDP layer the backend would then run on whatever its
weights were last bound to (merge / composite_view: another layer's slot) or fail without a bound slot
(multi_buffer). Its source was not available to verify whether it makes the DWDP calls itself, so it is refused on
DWDP layers, by name, instead of guessed at.
"""
from __future__ import annotations

from typing import Sequence

import torch


class PrecomputedRouteRefused(RuntimeError):
    """ConfigurableMoE.forward_precomputed_route was called on a DWDP layer."""


def refuse_precomputed_route(moe_modules: Sequence[torch.nn.Module], layer_ids: Sequence[int]) -> int:
    """Shadow `forward_precomputed_route` on every DWDP MoE module whose class has it with a refusal naming the layer
    (an instance attribute: callers look the method up on the instance); returns how many were shadowed."""
    n = 0
    for mod, lid in zip(moe_modules, layer_ids):
        if callable(getattr(type(mod), "forward_precomputed_route", None)):
            mod.forward_precomputed_route = _refusal(type(mod).__name__, lid)
            n += 1
    return n


def _refusal(cls: str, layer_idx: int):
    def forward_precomputed_route(*args, **kwargs):
        raise PrecomputedRouteRefused(
            f"dwdp_trtllm: {cls}.forward_precomputed_route (layer {layer_idx}) is not supported on DWDP layers: it "
            "bypasses forward_impl, where the layer's DWDP weights are bound (wait_and_bind) and its slot released, so "
            "the experts would run on another layer's weights. Route this layer through its forward() (the model path "
            "that precomputes the top-k), or serve this model without dwdp_trtllm (engine: upstream)")
    return forward_precomputed_route


class MoeHooks:
    def __init__(self, manager, moe_modules: Sequence[torch.nn.Module], owners: Sequence[torch.nn.Module],
                 layer_ids: Sequence[int]):
        self.manager, self.modules, self.owners, self.layer_ids = manager, list(moe_modules), list(owners), list(layer_ids)
        self.handles: list = []
        self.trace: list[tuple[str, int]] = []  # (event, position), for tests and debugging

    def attach(self) -> "MoeHooks":
        for pos, mod in enumerate(self.modules):
            self.handles.append(mod.register_forward_pre_hook(self._pre(pos)))
            self.handles.append(mod.register_forward_hook(self._post(pos)))
        return self

    def _pre(self, pos: int):
        def hook(module, args):
            self.trace.append(("wait", pos))
            self.manager.wait_and_bind(self.owners[pos], self.layer_ids[pos])
        return hook

    def _post(self, pos: int):
        def hook(module, args, output):
            self.trace.append(("release", pos))
            self.manager.record_compute_and_prefetch_next(self.layer_ids[pos])
        return hook

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
