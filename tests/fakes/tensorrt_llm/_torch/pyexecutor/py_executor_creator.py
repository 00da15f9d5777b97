"""create_py_executor, as tensorrt_llm/_torch/pyexecutor/py_executor_creator.py in the DWDP era: the executor gets a
DwdpManager only when TensorRT-LLM's own dwdp_config is set, and hands it to PyExecutor (whose `dwdp_manager`
parameter defaults to None: py_executor.py stored id 54965565749).
Sources: no stored copy of the DWDP-era creator was found (the stored NVIDIA/TensorRT-LLM one, @ 000429d57d42,
id 36005802797, predates DWDP); TensorRT-LLM's DWDP tech blog 19 (docs/source/blogs/tech_blog/, added by PR #12725;
stored id 51853955518): "If `dwdp_config` is present, `py_executor_creator.py` creates a `DwdpManager`", "At the
start of each forward step, `PyExecutor` calls `prefetch_first_layers()`"; the code, as a diff in NVIDIA/TensorRT-LLM PR #14453's review thread
(py_executor_creator.py, create_py_executor): `dwdp_manager: Optional[DwdpManager] = None` / `if
llm_args.dwdp_config is not None:` / `assert mapping.tp_size == 1 and llm_args.dwdp_config.dwdp_size > 1` /
`dwdp_manager = DwdpManager(config=llm_args.dwdp_config, dist=dist, mapping=mapping)` / `dwdp_manager.__enter__()`.
With engine dwdp_trtllm there is no dwdp_config, so PyExecutor.dwdp_manager is None. Upstream's own DWDP engine
(dwdp_config set) is not modelled by this fake."""
from .py_executor import PyExecutor


def create_py_executor(llm_args, model_engine):
    dwdp_manager = None
    if getattr(llm_args, "dwdp_config", None) is not None:
        raise NotImplementedError("fake tensorrt_llm: upstream's own DWDP engine (dwdp_config) is not modelled")
    return PyExecutor(model_engine, dwdp_manager=dwdp_manager)
