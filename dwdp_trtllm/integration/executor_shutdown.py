"""Whether an executor's shutdown may run the DWDP group's collective close, read from the executor (no import).

TensorRT-LLM's `PyExecutor.shutdown` (tensorrt_llm/_torch/pyexecutor/py_executor.py @ 00043967, `PyExecutor.shutdown`)
returns early when its hang detector fired (`if self.hang_detector.detected(): ... return`, "to avoid waiting for
hanging threads"; `HangDetector.detected`, tensorrt_llm/_torch/pyexecutor/hang_detector.py @ 06c5e532), before it
joins `self.worker_thread`; the process is about to end. Our close then must not wait for peers at the shutdown
barrier (a hung group would hold this rank for the whole shutdown timeout), and while the worker thread still runs a
forward it may be issuing copies from, or kernels on, the mapped peer memory: that stays mapped until the process
exits.
After a detected hang the close does not wait for this rank's own copies or device either: upstream returns at once
there, and a hung kernel would otherwise hold the process for the whole shutdown timeout.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalClose:
    """why: the reason this rank closes without its peers (said in the log and in the barrier's result);
    keep_shared: why the composite view and the transport stay mapped (None: released once drained)."""

    why: str
    keep_shared: str | None
    #: the hang detector fired: the close does not wait for this rank's copies or device either (close_in_order's
    #: skip_drain), as upstream's shutdown returns at once then
    hung: bool = False


def local_close(executor) -> LocalClose | None:
    """None when the executor shut down normally (the worker thread joined, no hang): the collective close runs.
    Reads `executor.hang_detector.detected()` and `executor.worker_thread.is_alive()` where they exist."""
    detector = getattr(executor, "hang_detector", None)
    hung = bool(detector is not None and detector.detected())
    thread = getattr(executor, "worker_thread", None)
    alive = bool(thread is not None and thread.is_alive())
    if not (hung or alive):
        return None
    why = "TensorRT-LLM's hang detector fired" if hung else "the executor's worker thread is still running"
    keep = "the executor's worker thread is still running and may still read them" if alive else \
        "TensorRT-LLM's hang detector fired: copies and kernels were not waited for and may still use them" if hung \
        else None
    return LocalClose(why, keep, hung)
