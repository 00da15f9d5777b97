"""PyExecutor forward step, as tensorrt_llm/_torch/pyexecutor/py_executor.py (stored ids 54965565749, 67119085479,
57354091563): `__init__(..., dwdp_manager: Optional[DwdpManager] = None)` keeps it as `self.dwdp_manager =
dwdp_manager`, and `_executor_loop` runs `if self.dwdp_manager is not None: self.dwdp_manager.prefetch_first_layers()`
right before `batch_outputs = self._forward_step(scheduled_batch)` (id 54965565749; the same lines are the
`_executor_loop` hunk of NVIDIA/TensorRT-LLM PR #12136's review thread). `self.dwdp_manager` is the executor's own
attribute, handed over by py_executor_creator (see py_executor_creator.py), NOT the global of pyexecutor/dwdp.py: a
manager registered only through set_global_dwdp_manager (ours) never receives prefetch_first_layers() from here.
`shutdown()` ends (same ids 54965565749, 67119085479, 57354091563) with `if self.dwdp_manager is not None:
self.dwdp_manager.__exit__(None, None, None); self.dwdp_manager = None`: again only the executor's own manager (the
rest of shutdown, request queue / KV transceiver / resource managers, is not modelled).
The hang path of `shutdown` (py_executor.py @ 0004396720054fd8e205cbf616f21f0b57c6b412, `PyExecutor.shutdown`):
`if self.hang_detector.detected(): logger.error("Hang detected, shutting down immediately."); return`, before
`self.worker_thread.join()`; `HangDetector.detected()` returns its `_detected` flag, set when no checkpoint came
within its timeout (tensorrt_llm/_torch/pyexecutor/hang_detector.py @ 06c5e53268583f2c4df5ab3b8fc07843b8f6f840).
Here the executor's forwards run on the caller's thread; `worker_thread` is a thread a test may start to stand for
a forward still running (never joined on the hang path, as upstream)."""
import threading


class HangDetector:
    """hang_detector.py @ 06c5e532: `detected()` under its lock; `fire()` stands for `_detect_hang` reaching its end."""

    def __init__(self):
        self.lock = threading.Lock()
        self._detected = False

    def fire(self):
        with self.lock:
            self._detected = True

    def detected(self):
        with self.lock:
            return self._detected


class PyExecutor:
    def __init__(self, model_engine, dwdp_manager=None):
        self.model_engine = model_engine
        self.dwdp_manager = dwdp_manager
        self.hang_detector = HangDetector()
        self.worker_thread = threading.Thread(target=lambda: None, name="fake_executor_loop")  # not started

    def forward_step(self, hidden_states):
        if self.dwdp_manager is not None:
            self.dwdp_manager.prefetch_first_layers()
        return self.model_engine.forward(hidden_states)

    def shutdown(self):
        if self.hang_detector.detected():
            return  # "Early return here to avoid waiting for hanging threads."
        if self.worker_thread.is_alive():
            self.worker_thread.join()
        if self.dwdp_manager is not None:
            self.dwdp_manager.__exit__(None, None, None)
            self.dwdp_manager = None
