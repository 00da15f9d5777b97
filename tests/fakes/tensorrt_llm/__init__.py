"""Fake TensorRT-LLM for CPU tests of dwdp_trtllm: the call paths that matter to our integration, each
behaviour citing the upstream file and commit (or stored-copy id) it mirrors. Everything else is left out.

Eras (tests/unit/test_trtllm_fake_world.py builds each from this tree):
- lifecycle (default tree): pyexecutor/dwdp.py with set_/get_global_dwdp_manager, ConfigurableMoE's DWDP
  block, ModelLoader.llm_args; PyExecutor calls prefetch_first_layers() only on the manager py_executor_creator
  made for TensorRT-LLM's own dwdp_config (none with our engine);
- hooks: blocks between "# DWDP-LIFECYCLE-BEGIN/END" removed, pyexecutor/dwdp.py deleted, lines starting
  "# HOOKS-ERA: " uncommented (ModelLoader.pytorch_backend_config, as @ b51992a3).
The expert GEMM (torch.ops.trtllm.fused_moe, C++) is replaced by a float32 torch reference
(fused_moe/fused_moe_cutlass.py `_fused_moe`) with the semantics the conformance audit assumed.
"""
__version__ = "0.0.0+fake"
