"""HopperDwdpManager: upstream's DwdpManager interface, backed by our AdapterRuntime (no tensorrt_llm import).

Interface mirrored from tensorrt_llm/_torch/pyexecutor/dwdp.py, VA era (stored id 56230681187):
`add_layer(layer_idx)` (ConfigurableMoE), `setup(model)`, `prefetch_first_layers()`, `wait_and_bind(backend_module,
layer_idx)` and `record_compute_and_prefetch_next(layer_idx)` (ConfigurableMoE.forward_impl, stored id
67533515591), `dwdp_rank`, `dwdp_size`, `is_enabled()`, `cleanup()`, `__enter__`/`__exit__`; and what upstream's
newer DwdpManager carries and forwards to `setup_dwdp(model, mapping, device_id, comm, layer_indices,
num_experts_per_worker, num_prefetch_experts)` (tensorrt_llm/_torch/modules/dwdp/setup.py @ 4d994fe4; upstream's
unit test of that DwdpManager, stored id 56154827357, reads `dwdp_group`, `num_groups` and the forwarded counts; the
stored VA-era dwdp.py sets `self.rank = global_mpi_rank()`): `rank` (global rank), `num_prefetch_experts`,
`num_experts_per_worker`, `dwdp_group` (ours: the model's torch.distributed group the transport exchanged handles on,
None before setup).

Two drivers call it:
- upstream lifecycle: ConfigurableMoE.forward_impl calls wait_and_bind / record_compute_and_prefetch_next (our
  gate patch makes it enable DWDP for this manager with the CUTLASS backend). PyExecutor calls
  prefetch_first_layers() only on the manager py_executor_creator gave it, which exists only with TensorRT-LLM's
  own dwdp_config (py_executor.py stored id 54965565749 `_executor_loop`; the creator per TensorRT-LLM's DWDP blog,
  stored id 51853955518, and the py_executor_creator.py diff in PR #14453's review thread): never this one;
- hooks (versions without that lifecycle): forward pre/post hooks on each MoE module make the same two calls.
Keyed by layer, as upstream's weight manager (modules/dwdp/weight_manager.py @ 11eba269, `next_moe_layer`,
`buffer_index_for_layer`): a forward may run the MoE layers in any order, repeat one (one-model MTP runs the
checkpoint's MTP layer once per draft step) or stop before the last ones; the runtime's slots record which layer
they hold (prefetcher.LayerSlots). The forward start is the bind of the first MoE position (setup order), reached
on every forward whatever calls the model (the engine calls model.forward() directly): there, as upstream's
PyExecutor does before each forward, prefetch_first_layers() re-primes the first layers. Still refused: a bind while
another layer is bound (its record never came), and record_compute_and_prefetch_next without a wait_and_bind of the
same layer (a TensorRT-LLM whose wrapper does not bind our weights would otherwise run the kernel on unbound
tensors). Every entry point raises DwdpCaptureError under CUDA stream capture (refuse_capture).
"""
from __future__ import annotations

from typing import Optional

import torch

from .adapter import AdapterRuntime
from .settings import to_upstream


class DwdpOrderError(RuntimeError):
    """A layer bound while another is still bound, or recorded without its bind."""


class DwdpCaptureError(RuntimeError):
    """A DWDP entry point ran while the current CUDA stream was capturing a graph."""


#: what a TensorRT-LLM YAML sets so that no DWDP layer runs under capture
CAPTURE_FIX = ("cuda_graph_config: null (TensorRT-LLM captures decode graphs by default: TorchLlmArgs.cuda_graph_config "
               "has default_factory=CudaGraphConfig) and no piecewise CUDA graphs in torch_compile_config "
               "(torch_compile_config: null, or enable_piecewise_cuda_graph: false)")


def refuse_capture(device: torch.device, where: str) -> None:
    """Raise DwdpCaptureError when the current stream of `device` is capturing a CUDA graph.

    Why refuse instead of capture: a captured DWDP layer would bake in the slot chosen at capture time, wait on copy
    events recorded outside the graph, and record our prefetch copies into the graph instead of running them, so a
    replay would read whatever the slot holds then. CPU devices never capture."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise DwdpCaptureError(
            f"dwdp_trtllm: {where} ran while the current CUDA stream is capturing a graph; DWDP cannot run inside a "
            f"captured graph (its prefetch copies, slot choice and event waits happen per forward). Set {CAPTURE_FIX} "
            "on DWDP context servers (`dwdp gen-config` writes cuda_graph_config: null)")


class HopperDwdpManager:
    is_dwdp_trtllm = True

    def __init__(self, config, dwdp_rank: int, rank: int | None = None):
        """config: our DwdpConfig; dwdp_rank: this rank's index in its DWDP group; rank: the global rank (upstream's
        `global_mpi_rank()`; default: groups are consecutive ranks, so dwdp_rank for the first group)."""
        self.config, self.dwdp_size, self.dwdp_rank = config, config.dwdp_size, dwdp_rank
        self.rank = dwdp_rank if rank is None else rank
        self.num_groups = config.num_groups
        self._registered_layers: list[int] = []
        self._rt: Optional[AdapterRuntime] = None
        self._pos: dict[int, int] = {}
        self._layout: dict | None = None  # of the model being built (use_layout), for the layout attributes below
        self.lifecycle = "unset"  # "upstream" | "hooks" once attached
        self._registry = None  # (get, set) of upstream's global manager slot, once registered there
        self.closed = False  # __exit__ ran: the process's next model gets a new manager

    # -- upstream's layout attributes -------------------------------------------------------------
    # Upstream MoE._init_dwdp_expert_layout (interface.py @ 581f0712) reads num_experts_per_worker,
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

    @property
    def num_prefetch_experts(self) -> int:
        """Upstream's DwdpConfig.num_prefetch_experts: the stride between consecutive ranks' first experts. The YAML's
        value in upstream form; for our derived placement the uniform split settings.to_upstream translates it to
        (ConfigError naming the key where it has no upstream form), for the model's expert count."""
        if self.config.upstream_placement:
            return self.config.num_prefetch_experts
        return to_upstream(self.config, self._read("num_slots"))[0]["num_prefetch_experts"]

    @property
    def dwdp_group(self):
        """The DWDP group's process group (upstream: an mpi4py sub-communicator made by the manager; ours: the
        torch.distributed group made per model at setup, group.dwdp_process_group); None before setup / after
        cleanup."""
        return None if self._rt is None else getattr(self._rt.transport, "group", None)

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
        """Forward start: the first MoE layers' copies are made in flight (already issued by the previous forward's
        releases in the usual case; issued now after a forward that stopped early), as upstream's
        DwdpManager.prefetch_first_layers before every forward. Also run by wait_and_bind of the first MoE position,
        since upstream's PyExecutor never calls it on this manager. Refused while a layer is bound (never released)."""
        rt = self.runtime
        refuse_capture(rt.device, "prefetch_first_layers")
        if rt.bound_position is not None:
            raise DwdpOrderError(f"forward started while MoE position {rt.bound_position} is still bound (its "
                                 "record_compute_and_prefetch_next never came)")
        rt.begin_forward()

    def wait_and_bind(self, backend_module, layer_idx: int) -> None:
        rt = self.runtime
        refuse_capture(rt.device, f"wait_and_bind(layer {layer_idx})")
        pos = self.position(layer_idx)
        owner = rt.owners[pos]
        if backend_module is not owner and not any(m is owner for m in backend_module.modules()):
            raise RuntimeError(f"wait_and_bind(layer {layer_idx}): module {type(backend_module).__name__} does not own "
                               "that layer's expert weights")
        if rt.bound_position is not None:
            raise DwdpOrderError(f"wait_and_bind(layer {layer_idx}) while MoE position {rt.bound_position} is still "
                                 "bound (its record_compute_and_prefetch_next never came)")
        if pos == 0:
            self.prefetch_first_layers()
        rt.wait_and_bind(pos)

    def record_compute_and_prefetch_next(self, layer_idx: int) -> None:
        rt = self.runtime
        refuse_capture(rt.device, f"record_compute_and_prefetch_next(layer {layer_idx})")
        pos = self.position(layer_idx)
        if rt.bound_position != pos:
            raise DwdpOrderError(
                f"record_compute_and_prefetch_next(layer {layer_idx}) without wait_and_bind of that layer: the kernel "
                "ran on weights this manager never bound (a TensorRT-LLM whose ConfigurableMoE.forward_impl does not "
                "call wait_and_bind, e.g. the IPC-era DWDP lifecycle?); run `dwdp check-trtllm`")
        rt.release(pos)

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
