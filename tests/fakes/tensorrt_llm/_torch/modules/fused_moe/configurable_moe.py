"""ConfigurableMoE, as tensorrt_llm/_torch/modules/fused_moe/configurable_moe.py (stored ids 51886803846,
67533515591): a MoE wrapper that builds its backend with init_load_balancer=False and
skip_create_weights_in_init, copies _BACKEND_SYNC_ATTRS from itself to the backend, then creates the weights.
Lifecycle era: `self.dwdp_manager = get_global_dwdp_manager()`, `_should_enable_dwdp()` (CuteDSL + NVFP4 only),
`add_layer(layer_idx)`; forward_impl calls `dwdp_manager.wait_and_bind(self.backend, self.layer_idx)` before
and `record_compute_and_prefetch_next(self.layer_idx)` after the backend's forward.
"""
from .fused_moe_cutlass import CutlassFusedMoE
from .interface import MoE
# DWDP-LIFECYCLE-BEGIN
from ...pyexecutor.dwdp import get_global_dwdp_manager
# DWDP-LIFECYCLE-END

_BACKEND_SYNC_ATTRS = ("num_slots", "layer_load_balancer", "initial_local_expert_ids", "initial_global_assignments",
                       "slot_start", "slot_end", "expert_size_per_partition")


class ConfigurableMoE(MoE):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        backend_kwargs = dict(kwargs, init_load_balancer=False)
        self.backend = CutlassFusedMoE(skip_create_weights_in_init=True, **backend_kwargs)
        for a in _BACKEND_SYNC_ATTRS:
            setattr(self.backend, a, getattr(self, a))
        self.backend.create_weights()
        self._weights_removed = True  # model_loader runs post_load_weights on the backend only
        self.enable_dwdp = False
# DWDP-LIFECYCLE-BEGIN
        self.dwdp_manager = get_global_dwdp_manager()
        if self.dwdp_manager is not None and self._should_enable_dwdp():
            self.enable_dwdp = True
            self.dwdp_manager.add_layer(layer_idx=self.layer_idx)

    def _should_enable_dwdp(self):
        # upstream: only CuteDslFusedMoE with NVFP4 (no CuteDSL backend exists in this fake)
        return False
# DWDP-LIFECYCLE-END

    def load_weights(self, weights):
        self.backend.load_weights(weights)

    def forward_impl(self, x, router_logits):
# DWDP-LIFECYCLE-BEGIN
        if self.enable_dwdp:
            self.dwdp_manager.wait_and_bind(self.backend, self.layer_idx)
# DWDP-LIFECYCLE-END
        out = self.backend.forward_impl(x, router_logits)
# DWDP-LIFECYCLE-BEGIN
        if self.enable_dwdp:
            self.dwdp_manager.record_compute_and_prefetch_next(self.layer_idx)
# DWDP-LIFECYCLE-END
        return out

    def forward(self, x, router_logits):
        return self.forward_impl(x, router_logits)
