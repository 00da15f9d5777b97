"""TensorRT-LLM integration (docs/TRTLLM.md).

Everything here except `trtllm/` is importable without tensorrt_llm: the activation hook (boot, hook),
the integration config and its translation to upstream's `dwdp_config` (settings), the DWDP group (group),
the adapter of TensorRT-LLM's expert tensors to the DWDP core (adapter, full_slot), the Hopper manager with
upstream's lifecycle interface (hopper_manager), the MoE hooks for versions without it (moe_hooks), which
engine and rank this process has (process_role) and the YAML
generators (gen_config).
`trtllm/` is the only place that imports tensorrt_llm, and only lazily, after it was imported by
TensorRT-LLM itself.
"""
