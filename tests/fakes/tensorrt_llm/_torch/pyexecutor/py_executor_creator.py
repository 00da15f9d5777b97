"""create_py_executor, as tensorrt_llm/_torch/pyexecutor/py_executor_creator.py in the DWDP era (PR #17546 diff
in its review thread: `dwdp_manager: Optional[DwdpManager] = None` / `if llm_args.dwdp_config is not None: ...`):
the executor gets a DwdpManager only when TensorRT-LLM's own dwdp_config is set, and hands it to PyExecutor.
With engine dwdp_trtllm there is no dwdp_config, so PyExecutor.dwdp_manager is None. Upstream's own DWDP
engine (dwdp_config set) is not modelled by this fake."""
from .py_executor import PyExecutor


def create_py_executor(llm_args, model_engine):
    dwdp_manager = None
    if getattr(llm_args, "dwdp_config", None) is not None:
        raise NotImplementedError("fake tensorrt_llm: upstream's own DWDP engine (dwdp_config) is not modelled")
    return PyExecutor(model_engine, dwdp_manager=dwdp_manager)
