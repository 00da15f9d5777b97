"""The only package that touches tensorrt_llm, and only after TensorRT-LLM imported the target modules.

targets.py:     the patch table, target verification (PatchTargetMissing), the check-trtllm report, class lookup.
patches.py:     what each patch does; the post-import callback (engine decided first).
moe_layout.py:  MoE expert-layout override (which experts this rank stores), from our placement.
model_setup.py: after weight loading: checks, group, AdapterRuntime, promotion, lifecycle or hooks.
moe_unit.py:    gemm multi_buffer's execution unit in place of CutlassFusedMoE.run_moe.
"""
