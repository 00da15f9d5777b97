"""PyExecutor forward step, as tensorrt_llm/_torch/pyexecutor/py_executor.py after PR #12136 (merged; diff of
`_executor_loop` in its review thread): `if self.dwdp_manager is not None: self.dwdp_manager.prefetch_first_layers()`
right before `self._forward_step(...)`. `self.dwdp_manager` is the executor's own attribute, handed over by
py_executor_creator (see py_executor_creator.py), NOT the global of pyexecutor/dwdp.py: a manager registered
only through set_global_dwdp_manager (ours) never receives prefetch_first_layers() from here."""


class PyExecutor:
    def __init__(self, model_engine, dwdp_manager=None):
        self.model_engine = model_engine
        self.dwdp_manager = dwdp_manager

    def forward_step(self, hidden_states):
        if self.dwdp_manager is not None:
            self.dwdp_manager.prefetch_first_layers()
        return self.model_engine.forward(hidden_states)
