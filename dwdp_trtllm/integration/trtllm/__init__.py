"""The only package that touches tensorrt_llm, and only after TensorRT-LLM imported the target modules.

patches.py: the patch table, target verification (PatchTargetMissing) and the post-import callback.
moe_layout.py:  MoE expert-layout override (which experts this rank stores), from our placement.
model_setup.py: after weight loading: group, transport, full-slot buffers, copy plans, per-layer hooks.
"""
