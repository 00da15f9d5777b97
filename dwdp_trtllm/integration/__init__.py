"""TensorRT-LLM integration (docs/TRTLLM.md).

Everything here except `trtllm/` is importable without tensorrt_llm: the activation hook (boot, hook),
the integration config and its translation to upstream's `dwdp_config` (settings), the full-slot copy
layout (full_slot), the per-layer prefetch pipeline (pipeline) and the YAML generators (gen_config).
`trtllm/` is the only place that imports tensorrt_llm, and only lazily, after it was imported by
TensorRT-LLM itself.
"""
