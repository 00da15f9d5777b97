"""PyExecutor forward step, as tensorrt_llm/_torch/pyexecutor/py_executor.py (stored ids 54965565749, 67119085479,
57354091563): `__init__(..., dwdp_manager: Optional[DwdpManager] = None)` keeps it as `self.dwdp_manager =
dwdp_manager`, and `_executor_loop` runs `if self.dwdp_manager is not None: self.dwdp_manager.prefetch_first_layers()`
right before `batch_outputs = self._forward_step(scheduled_batch)` (id 54965565749; the same lines are the
`_executor_loop` hunk of NVIDIA/TensorRT-LLM PR #12136's review thread). `self.dwdp_manager` is the executor's own
attribute, handed over by py_executor_creator (see py_executor_creator.py), NOT the global of pyexecutor/dwdp.py: a
manager registered only through set_global_dwdp_manager (ours) never receives prefetch_first_layers() from here.
`shutdown()` ends (same ids 54965565749, 67119085479, 57354091563) with `if self.dwdp_manager is not None:
self.dwdp_manager.__exit__(None, None, None); self.dwdp_manager = None`: again only the executor's own manager (the
rest of shutdown, request queue / KV transceiver / resource managers, is not modelled)."""


class PyExecutor:
    def __init__(self, model_engine, dwdp_manager=None):
        self.model_engine = model_engine
        self.dwdp_manager = dwdp_manager

    def forward_step(self, hidden_states):
        if self.dwdp_manager is not None:
            self.dwdp_manager.prefetch_first_layers()
        return self.model_engine.forward(hidden_states)

    def shutdown(self):
        if self.dwdp_manager is not None:
            self.dwdp_manager.__exit__(None, None, None)
            self.dwdp_manager = None
