"""HopperDwdpManager: upstream's DwdpManager interface, backed by our AdapterRuntime (no tensorrt_llm import).

Interface mirrored from tensorrt_llm/_torch/pyexecutor/dwdp.py, VA era (stored id 56230681187):
`add_layer(layer_idx)` (ConfigurableMoE), `setup(model)`, `prefetch_first_layers()`, `wait_and_bind(backend_module,
layer_idx)` and `record_compute_and_prefetch_next(layer_idx)` (ConfigurableMoE.forward_impl, stored id
67533515591), `dwdp_rank`, `dwdp_size`, `is_enabled()`, `cleanup()`, `__enter__`/`__exit__`.

Two drivers call it:
- upstream lifecycle: ConfigurableMoE.forward_impl calls wait_and_bind / record_compute_and_prefetch_next (our
  gate patch makes it enable DWDP for this manager with the CUTLASS backend). PyExecutor calls
  prefetch_first_layers() only on the manager py_executor_creator gave it, which exists only with TensorRT-LLM's
  own dwdp_config (py_executor.py stored id 54965565749 `_executor_loop`; the creator per TensorRT-LLM's DWDP blog,
  stored id 51853955518, and the py_executor_creator.py diff in PR #14453's review thread): never this one;
- hooks (versions without that lifecycle): forward pre/post hooks on each MoE module make the same two calls.
Either way the forward-start check runs inside wait_and_bind of the first MoE position, a point reached on every
forward whatever calls the model (the engine calls model.forward() directly). Copies are started by the
Prefetcher itself: positions 0..S-1 at setup, then each release of position p issues sequence p + S, which wraps
into the next forward; prefetch_first_layers() never issues, it only checks that the previous forward ran every
MoE layer. record_compute_and_prefetch_next without a wait_and_bind of the same layer is refused (a TensorRT-LLM
whose wrapper does not bind our weights would otherwise run the kernel on unbound tensors).
"""
from __future__ import annotations

from typing import Optional

from .adapter import AdapterRuntime


class DwdpOrderError(RuntimeError):
    """A forward did not run the MoE layers in setup order (or stopped part-way)."""


class HopperDwdpManager:
    is_dwdp_trtllm = True

    def __init__(self, config, dwdp_rank: int):
        """config: our DwdpConfig; dwdp_rank: this rank's index in its DWDP group."""
        self.config, self.dwdp_size, self.dwdp_rank = config, config.dwdp_size, dwdp_rank
        self.num_groups = config.num_groups
        self._registered_layers: list[int] = []
        self._rt: Optional[AdapterRuntime] = None
        self._pos: dict[int, int] = {}
        self._layout: dict | None = None  # of the model being built (use_layout), for the layout attributes below
        self.lifecycle = "unset"  # "upstream" | "hooks" once attached
        self._registry = None  # (get, set) of upstream's global manager slot, once registered there
        self.closed = False  # __exit__ ran: the process's next model gets a new manager

    # -- upstream's layout attributes -------------------------------------------------------------
    # Upstream MoE._init_dwdp_expert_layout (interface.py, stored id 57392471995) reads num_experts_per_worker,
    # dwdp_size and start_expert_id from whatever get_global_dwdp_manager() returns. Plain reads of the layout the
    # MoE.__init__ wrapper computed and checked (trtllm/moe_layout.py owns that check, in every era; the manager is
    # registered only in the VA era, and there our wrap skips upstream's method, so these are a fallback surface,
    # not a second check): with them upstream's method would compute the slot range override_layout sets (it would
    # also set initial_global_assignments round-robin over the DWDP ranks; override_layout leaves MoE.__init__'s
    # sequential range(E) at moe_ep_size 1, and promotion sets the full range after loading).
    def use_layout(self, layout: dict) -> None:
        """The layout (moe_layout.layout_attrs) of the model now being built, set before each MoE.__init__ runs."""
        self._layout = layout

    def _read(self, key: str) -> int:
        if self._layout is None:
            raise RuntimeError("HopperDwdpManager: expert layout read before the model's layout was set "
                               "(dwdp_trtllm's MoE.__init__ wrapper did not run first?)")
        return self._layout[key]

    @property
    def num_experts_per_worker(self) -> int:
        """Experts this rank stores (upstream: DwdpConfig.num_experts_per_worker)."""
        return self._read("expert_size_per_partition")

    @property
    def start_expert_id(self) -> int:
        """First expert id this rank stores."""
        return self._read("slot_start")

    # -- upstream lifecycle surface ---------------------------------------------------------------
    def add_layer(self, layer_idx: int) -> None:
        """Register an MoE layer index (ConfigurableMoE.__init__); duplicates are ignored like upstream."""
        if layer_idx not in self._registered_layers:
            self._registered_layers.append(layer_idx)

    def is_enabled(self) -> bool:
        return self.dwdp_size > 1

    def setup(self, model) -> None:
        """Upstream calls this after loading only for its own manager; ours is set up by the ModelLoader.load
        wrapper (attach). A call after attach is a no-op; before it, an error."""
        if self._rt is None:
            raise RuntimeError("HopperDwdpManager.setup: dwdp_trtllm sets the runtime up in ModelLoader.load; "
                               "the wrapped loader did not run (is the integration activated in this process?)")

    def check_free(self) -> None:
        """Refuse a second model's runtime while this manager holds an open one (attach; model_setup calls it before
        allocating anything for the new model).

        Refused rather than closing the first: the first runtime may still serve a live model (its executor not shut
        down), and closing it under that model would break it at its next forward, far from the cause; replacing
        it silently (as before) left its exported buffers, peer mappings and prefetcher open for the life of the
        process (e.g. a retry after construction failed past ModelLoader.load, with no rollback exit of this manager)
        and mixed two models' layers on one manager. A refusal allocates nothing and mixes nothing; whoever owns the
        first model closes it (executor shutdown / __exit__ / cleanup()), after which attach is allowed again."""
        rt = self._rt
        if rt is not None and not getattr(rt, "closed", False):
            raise RuntimeError(
                f"HopperDwdpManager.attach: this process's DWDP manager still holds the open runtime of an earlier "
                f"model ({rt.num_layers} MoE layers, gemm {getattr(rt, 'gemm', '?')}); a second one would leave its "
                "exported buffers, peer mappings and prefetcher open, or run two models on one manager. Shut the first "
                "executor down (or call cleanup() on this manager) before building another model; after a failed "
                "construction, restart the process")

    def attach(self, runtime: AdapterRuntime, layer_ids: list[int], lifecycle: str) -> None:
        """layer_ids[p]: the model layer index of MoE position p (what upstream passes as layer_idx). One open
        runtime at a time: check_free."""
        self.check_free()
        if len(set(layer_ids)) != len(layer_ids) or len(layer_ids) != runtime.num_layers:
            raise ValueError(f"layer ids {layer_ids} must be {runtime.num_layers} distinct values")
        self._rt, self._pos, self.lifecycle = runtime, {l: p for p, l in enumerate(layer_ids)}, lifecycle

    @property
    def runtime(self) -> AdapterRuntime:
        if self._rt is None:
            raise RuntimeError("HopperDwdpManager used before the runtime was attached (setup after load)")
        return self._rt

    def position(self, layer_idx: int) -> int:
        try:
            return self._pos[layer_idx]
        except KeyError:
            raise DwdpOrderError(f"layer {layer_idx} is not a DWDP MoE layer (have {sorted(self._pos)})") from None

    def prefetch_first_layers(self) -> None:
        """Forward start: the first positions' copies are already in flight (issued at setup or by the previous
        forward's releases); refuse a forward that starts while the previous one stopped part-way. Also run by
        wait_and_bind of the first MoE position, since upstream's PyExecutor never calls it on this manager."""
        rt = self.runtime
        bound = rt.bound_position
        if bound is not None or not rt.at_forward_start():
            raise DwdpOrderError(f"forward started while the previous one stopped after MoE position "
                                 f"{(rt.prefetcher.n - 1) % rt.num_layers}"
                                 f"{' (position ' + str(bound) + ' bound, never released)' if bound is not None else ''}"
                                 ": DWDP slots would hold the wrong layers")

    def wait_and_bind(self, backend_module, layer_idx: int) -> None:
        pos = self.position(layer_idx)
        rt = self.runtime
        owner = rt.owners[pos]
        if backend_module is not owner and not any(m is owner for m in backend_module.modules()):
            raise RuntimeError(f"wait_and_bind(layer {layer_idx}): module {type(backend_module).__name__} does not own "
                               "that layer's expert weights")
        if pos == 0:
            self.prefetch_first_layers()
        elif rt.bound_position is not None:
            raise DwdpOrderError(f"wait_and_bind(layer {layer_idx}) while MoE position {rt.bound_position} is still "
                                 "bound (its record_compute_and_prefetch_next never came)")
        rt.wait_and_bind(pos)

    def record_compute_and_prefetch_next(self, layer_idx: int) -> None:
        pos = self.position(layer_idx)
        if self.runtime.bound_position != pos:
            raise DwdpOrderError(
                f"record_compute_and_prefetch_next(layer {layer_idx}) without wait_and_bind of that layer: the kernel "
                "ran on weights this manager never bound (a TensorRT-LLM whose ConfigurableMoE.forward_impl does not "
                "call wait_and_bind, e.g. the IPC-era DWDP lifecycle?); run `dwdp check-trtllm`")
        self.runtime.release(pos)

    def cleanup(self) -> None:
        """Close the runtime (AdapterRuntime.close: prefetcher drained, the DWDP group's shutdown barrier, bounded by
        the integration YAML's shutdown_timeout_s, then copy scheduler, composite view and the transport released:
        exported buffers, peer mappings); idempotent. Collective over the DWDP group: every rank's executor shutdown
        calls it; a rank that never does delays its peers' release by the timeout, named in their warning."""
        if self._rt is not None:
            self._rt.close()
            self._rt = None

    def register_in(self, get_global, set_global) -> None:
        """Register as upstream's global DWDP manager (pyexecutor/dwdp.py set_/get_global_dwdp_manager)."""
        set_global(self)
        self._registry = (get_global, set_global)

    def __enter__(self) -> "HopperDwdpManager":
        return self

    def __exit__(self, *exc) -> bool:
        """As upstream's (dwdp.py VA era, stored id 56230681187): cleanup() and unregister, so that after a failed
        executor construction (create_py_executor's rollback calls __exit__ of a manager registered meanwhile,
        TensorRT-LLM test stored id 57433833011) or a shutdown no closed manager stays the global one."""
        self.cleanup()
        self.closed = True
        if self._registry is not None:
            get_global, set_global = self._registry
            if get_global() is self:
                set_global(None)
            self._registry = None
        return False
