"""Fake TensorRT-LLM for CPU tests of dwdp_trtllm: the call paths that matter to our integration, each
behaviour citing the upstream file and commit (or stored-copy id) it mirrors. Everything else is left out.

Eras (tests/unit/test_trtllm_fake_world.py `era_tree` builds each from this tree):
- lifecycle (VA era): blocks between "# DWDP-BEGIN/END" and "# VA-BEGIN/END" kept, "# IPC-BEGIN/END" and
  "# PREVA-BEGIN/END" removed (PREVA: what every era before it has, e.g. the keyword run_moe), fused_moe/impl_contract.py
  kept (deleted in the other eras),
  and the MoE package moved from _torch/modules/fused_moe to _torch/moe/fused_moe (where the VA-era
  configurable_moe.py, stored id 67533515591, lives: it imports tensorrt_llm._torch.moe.fused_moe.interface):
  pyexecutor/dwdp.py with set_/get_global_dwdp_manager and DwdpManager.wait_and_bind, ConfigurableMoE's DWDP
  block whose forward_impl calls wait_and_bind + record_compute_and_prefetch_next, ModelLoader.llm_args;
- ipc (IPC era): "# IPC-BEGIN/END" kept, "# VA-BEGIN/END" removed: DwdpManager without wait_and_bind,
  forward_impl records only (the weight view is a CuteDSL-only scheduler path);
- hooks: every DWDP/VA/IPC block removed, pyexecutor/dwdp.py deleted, lines starting "# HOOKS-ERA: "
  uncommented (ModelLoader.pytorch_backend_config, as @ b51992a3).
PyExecutor calls prefetch_first_layers() only on the manager py_executor_creator made for TensorRT-LLM's own
dwdp_config (none with our engine), and its shutdown() exits only that manager. Upstream DwdpManager's lifecycle
(__init__ / __enter__ raising when a global manager is registered / __exit__ unregistering), create_py_executor's
rollback of a manager registered during a failed construction and ModelLoader.reload are modelled as cited in
pyexecutor/dwdp.py, py_executor_creator.py, py_executor.py and model_loader.py.
The expert GEMM (torch.ops.trtllm.fused_moe, C++) is replaced by a float32 torch reference
(fused_moe/fused_moe_cutlass.py `_fused_moe`) with the semantics the conformance audit assumed. It is reached the
way upstream reaches it: ConfigurableMoE routes, calls backend.quantize_input, then backend.run_moe with keywords
(through the IPC era) or a MoERunContext (VA era), which is where gemm multi_buffer's execution unit takes over.
"""
__version__ = "0.0.0+fake"
