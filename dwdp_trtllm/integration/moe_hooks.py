"""Hook driver for TensorRT-LLM versions without upstream's DWDP lifecycle (no tensorrt_llm import).

TensorRT-LLM's engine calls `model.forward(**kwargs)` directly (PyTorchModelEngine.model_forward, stored
id 5682132957; the decoder runner's model_forward, stored id 69864124258), so a forward pre-hook on the
model never fires. Only the MoE modules are called through nn.Module.__call__ (Deepseekv3MoE:
`self.experts(...)`, stored ids 2891600299, 3518086746), so all hooks live there:

    MoE p pre-hook:   manager.wait_and_bind(owner_p, layer_id_p)   (p == 0: the forward-start check inside)
    MoE p post-hook:  manager.record_compute_and_prefetch_next(layer_id_p)

which are exactly the calls upstream's ConfigurableMoE.forward_impl makes in versions that have the
lifecycle (see hopper_manager.py).
"""
from __future__ import annotations

from typing import Sequence

import torch


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
