"""ConfigurableMoE: a MoE wrapper that builds its backend with init_load_balancer=False, without_comm=True and
skip_create_weights_in_init (configurable_moe.py stored id 3814212287: create_moe_backend(...) with those three), copies _BACKEND_SYNC_ATTRS from itself to the backend, then creates the weights
(configurable_moe.py, stored ids 51886803846, 67533515591; the copy is field by field @ 90c54bad).

DWDP block, by era (tests/unit/test_trtllm_fake_world.py builds each era from this file):
- IPC era (stored id 51886803846, with pyexecutor/dwdp.py @ 198af04538bc): `self.dwdp_manager =
  get_global_dwdp_manager()`; if not None and `_should_enable_dwdp()` (CuteDslFusedMoE + NVFP4 only):
  `enable_dwdp`, `dwdp_handle_collector = dwdp_manager.add_layer(layer_idx=...)`, `dwdp_rank =
  dwdp_manager.dwdp_rank`. forward_impl calls ONLY `record_compute_and_prefetch_next(layer_idx)` after the
  scheduler; the weight view is built inside moe_scheduler (stored id 52297624341) for CuteDslFusedMoE only
  (`moe.dwdp_manager.build_weight_view(moe.layer_idx, moe.backend)`): no wait_and_bind for any backend.
- VA era (stored id 67533515591, tensorrt_llm/_torch/moe/fused_moe/configurable_moe.py): same gate
  (backend.capabilities.supports_dwdp, not uses_locality_domain, NVFP4), `add_layer(layer_idx=...)` (returns
  None); forward_impl calls `dwdp_manager.wait_and_bind(self.backend, self.layer_idx)` before the scheduler
  and `record_compute_and_prefetch_next(self.layer_idx)` after it.
- hooks era (@ 90c54bad): no DWDP block.

Expert call path (`_scheduler_forward`), as ExternalCommMoEScheduler._forward_chunk_impl with no comm (TP1, or DWDP:
`_create_comm_strategy_auto` returns None when enable_dwdp, id 67533515591), single chunk: routing at the wrapper
(`moe.routing_method.apply(router_logits)`, ids `.to(torch.int32)`), `x, x_sf = moe.backend.quantize_input(x,
post_quant_comm=False)`, then `moe.backend.run_moe(...)`:
- through the IPC era ("# PREVA", moe_scheduler.py stored id 52297624341; ConfigurableMoE stored id 3814212287 inline):
  keywords x, token_selected_experts, token_final_scales, x_sf plus _get_backend_kwargs for CutlassFusedMoE
  (is_sf_swizzled, output_dtype, enable_alltoall, moe_output);
- VA era ("# VA", scheduler stored id 57366040755): `ctx = self._build_run_context(...)` (a MoERunContext with a
  MoECommPlan), `moe.backend.run_moe(ctx, workspace=...)`.
"""
import torch

from .fused_moe_cutlass import CutlassFusedMoE
from .interface import MoE
# VA-BEGIN
from .impl_contract import MoECommPlan, MoERunContext
# VA-END
# DWDP-BEGIN
from ...pyexecutor.dwdp import get_global_dwdp_manager
# DWDP-END

_BACKEND_SYNC_ATTRS = ("num_slots", "layer_load_balancer", "initial_local_expert_ids", "initial_global_assignments",
                       "slot_start", "slot_end", "expert_size_per_partition")


class ConfigurableMoE(MoE):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        backend_kwargs = dict(kwargs, init_load_balancer=False)
        self.backend = CutlassFusedMoE(skip_create_weights_in_init=True, without_comm=True, **backend_kwargs)
        for a in _BACKEND_SYNC_ATTRS:
            setattr(self.backend, a, getattr(self, a))
        self.backend.create_weights()
        self._weights_removed = True  # model_loader runs post_load_weights on the backend only
        self.enable_dwdp = False
# DWDP-BEGIN
        self.dwdp_manager = get_global_dwdp_manager()
        if self.dwdp_manager is not None and self._should_enable_dwdp():
            self.enable_dwdp = True
# IPC-BEGIN
            self.dwdp_handle_collector = self.dwdp_manager.add_layer(layer_idx=self.layer_idx)
            self.dwdp_rank = self.dwdp_manager.dwdp_rank
            self.backend.dwdp_handle_collector = self.dwdp_handle_collector
# IPC-END
# VA-BEGIN
            self.dwdp_manager.add_layer(layer_idx=self.layer_idx)
# VA-END

    def _should_enable_dwdp(self):
        # upstream: only a CuteDSL backend with NVFP4 (no CuteDSL backend exists in this fake)
        return False
# DWDP-END

    def load_weights(self, weights):
        self.backend.load_weights(weights)

    def _scheduler_forward(self, x, router_logits, output_dtype):
        # moe_scheduler: the IPC era passes a DWDP weight view to CuteDslFusedMoE only; every other backend
        # (CutlassFusedMoE here) runs on its own parameters
        token_selected_experts, token_final_scales = self.routing_method.apply(router_logits)
        return self._run_route(x, token_selected_experts, token_final_scales, output_dtype, router_logits)

    def forward_precomputed_route(self, x, token_selected_experts, token_final_scales, **kwargs):
        """A top-k computed elsewhere, run by the scheduler without routing and without forward_impl (so without its
        DWDP calls): ConfigurableMoE.forward_precomputed_route -> ExternalCommMoEScheduler.forward_precomputed_route ->
        backend.quantize_input / run_moe with the ids as int32, as the upstream unit tests
        test_external_comm_scheduler_uses_precomputed_route and test_configurable_moe_precomputed_route_advances_repeat_idx
        of NVIDIA/TensorRT-LLM show it (the index returned that test file's text without its path or commit, and not
        the method's source). repeat_idx and DP padding are not modelled."""
        return self._run_route(x, token_selected_experts, token_final_scales, kwargs.get("output_dtype") or x.dtype,
                               None)

    def _run_route(self, x, token_selected_experts, token_final_scales, output_dtype, router_logits):
        backend = self.backend
        token_selected_experts = token_selected_experts.to(torch.int32)
        x, x_sf = backend.quantize_input(x, post_quant_comm=False)
# PREVA-BEGIN
        return backend.run_moe(x=x, token_selected_experts=token_selected_experts,
                               token_final_scales=token_final_scales, x_sf=x_sf, is_sf_swizzled=True,
                               output_dtype=output_dtype, enable_alltoall=False, moe_output=None)
# PREVA-END
# VA-BEGIN
        ctx = MoERunContext(token_selected_experts=token_selected_experts, token_final_scales=token_final_scales,
                            x=x, x_sf=x_sf, output_dtype=output_dtype, router_logits=router_logits,
                            all_rank_num_tokens=[x.shape[0]],
                            comm_plan=MoECommPlan(input_sf_swizzled=True, enable_alltoall=False, moe_output=None,
                                                  payload_in_workspace=False))
        return backend.run_moe(ctx, workspace=None)
# VA-END

    def forward_impl(self, x, router_logits):
        output_dtype = x.dtype  # forward_impl: `output_dtype = x.dtype` for a plain tensor (id 67533515591)
# VA-BEGIN
        if self.enable_dwdp:
            self.dwdp_manager.wait_and_bind(self.backend, self.layer_idx)
# VA-END
        out = self._scheduler_forward(x, router_logits, output_dtype)
# DWDP-BEGIN
        if self.enable_dwdp:
            self.dwdp_manager.record_compute_and_prefetch_next(self.layer_idx)
# DWDP-END
        return out

    def forward(self, x, router_logits):
        return self.forward_impl(x, router_logits)
