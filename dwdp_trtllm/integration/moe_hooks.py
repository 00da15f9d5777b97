"""Hook driver for TensorRT-LLM versions without upstream's DWDP lifecycle (no tensorrt_llm import).

TensorRT-LLM's engine calls `model.forward(**kwargs)` directly (PyTorchModelEngine.model_forward, stored
id 5682132957; the decoder runner's model_forward, stored id 69864124258), so a forward pre-hook on the
model never fires. Only the MoE modules are called through nn.Module.__call__ (Deepseekv3MoE:
`self.experts(...)`, stored ids 2891600299, 3518086746), so all hooks live there:

    MoE p pre-hook:   manager.wait_and_bind(owner_p, layer_id_p)   (p == 0: the forward-start check inside)
    MoE p post-hook:  manager.record_compute_and_prefetch_next(layer_id_p)

which are exactly the calls upstream's ConfigurableMoE.forward_impl makes in versions that have the
lifecycle (see hopper_manager.py).

route_precomputed (both lifecycles): ConfigurableMoE.forward_precomputed_route runs a top-k computed elsewhere
through the scheduler (ConfigurableMoE.forward_precomputed_route -> ExternalCommMoEScheduler.forward_precomputed_route
-> backend.quantize_input / run_moe, as NVIDIA/TensorRT-LLM's unit tests test_external_comm_scheduler_uses_precomputed_
route and test_configurable_moe_precomputed_route_advances_repeat_idx drive it), bypassing forward_impl (where the
lifecycle's wait_and_bind / record calls are) and nn.Module.__call__ (where the hooks are). No stored upstream prefill
path calls it: its one caller in the stored source is the DeepSeek resident decode engine (a decode-only native
engine shim, whose `_run_precomputed_moe_experts_stage` calls `experts.forward_precomputed_route` when callable),
which a context server never runs. So that a DWDP layer stays correct wherever it is called, it is routed through the
same calls forward_impl makes: wait_and_bind(owner, layer) before, record_compute_and_prefetch_next(layer) after (a
nested call through the same wrapper makes them once). A version whose own method also called wait_and_bind would
meet the manager's DwdpOrderError ("still bound"), not a silent double bind.
"""
from __future__ import annotations

import threading
from typing import Sequence

import torch


def route_precomputed(manager, moe_modules: Sequence[torch.nn.Module], owners: Sequence[torch.nn.Module],
                      layer_ids: Sequence[int]) -> int:
    """Wrap `forward_precomputed_route` on every DWDP MoE module whose class has it (an instance attribute: callers
    look the method up on the instance) so that it binds the layer's DWDP weights first and releases its slot after,
    as forward_impl does (module docstring); returns how many were wrapped."""
    n = 0
    for mod, owner, lid in zip(moe_modules, owners, layer_ids):
        if callable(getattr(type(mod), "forward_precomputed_route", None)):
            mod.forward_precomputed_route = _bound_route(manager, mod.forward_precomputed_route, owner, lid)
            n += 1
    return n


def _bound_route(manager, orig, owner, layer_idx: int):
    active = threading.local()

    def forward_precomputed_route(*args, **kwargs):
        if getattr(active, "on", False):  # nested through this wrapper: the layer is bound already
            return orig(*args, **kwargs)
        manager.wait_and_bind(owner, layer_idx)
        active.on = True
        try:
            out = orig(*args, **kwargs)
        finally:
            active.on = False
        manager.record_compute_and_prefetch_next(layer_idx)  # as forward_impl: after the scheduler returned
        return out
    forward_precomputed_route.__wrapped__ = orig
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
