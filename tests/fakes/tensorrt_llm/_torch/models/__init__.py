"""Fake TensorRT-LLM package (tests only); see tests/fakes/tensorrt_llm/__init__.py."""
