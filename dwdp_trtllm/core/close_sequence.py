"""The one close policy of a DWDP rank: DwdpRuntime.close (embedded engine) and AdapterRuntime.close (TensorRT-LLM).

Order, every wait inside ONE deadline (timeout_s from the call):
 1. drain: our prefetcher's copies in flight (Prefetcher.drain with the deadline), then the device (a CUDA
    synchronize, waited for at most what is left of the deadline); we read nothing of our peers any more;
 2. the shutdown barrier (transport/close_barrier.py) on the group the transport exchanged handles on, with what is
    left of the deadline: every peer has drained its copies from our exported buffers. It runs even when step 1
    failed, so that peers are not held up for their whole timeout;
 3. release_local(): what only this rank uses (the copy scheduler; the adapter's owner tensors rebound to empty);
 4. only when step 1 finished: release_shared() (the composite view's slot mappings, then the transport: peer
    mappings and our exported buffers). When it did not, those stay mapped until the process exits, named in an
    error: copies of ours may still read peers' memory or write our slot ranges, and unmapping under them is worse
    than a leak;
 5. after_barrier() (the adapter: the DWDP group's process groups destroyed): the group carries nothing more.
A local close (the host's executor hung or its worker thread still runs: integration/executor_shutdown.py) skips
step 2 (this rank does not wait for peers; the result says why) and, when asked (keep_shared), leaves step 4 out too.
After a detected hang (skip_drain) step 1 is left out as well: the close returns at once instead of waiting up to the
timeout for copies or kernels that may never finish, as TensorRT-LLM's PyExecutor.shutdown returns at once there
(py_executor.py @ 0004396720054fd8, `if self.hang_detector.detected(): ... return`); the result says the drain was
not waited for, and the mappings stay (step 4 needs a finished drain).
Nothing here raises for a failed drain or a missing peer (both are said in the log and in CloseResult); a failure
of a release step propagates after the later steps ran.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .transport.close_barrier import BarrierResult, close_barrier


@dataclass
class CloseResult:
    """What a close did: drained (step 1 finished), why not (what was still in flight), the barrier's result, when
    this rank entered the barrier and when the transport was released (time.time(); None: left mapped)."""

    drained: bool
    not_drained: str | None
    barrier: BarrierResult
    entered_at: float
    released_at: float | None = None

    def as_info(self) -> dict:
        """AdapterRuntime.close_info's dict (barrier, entered_at, released_at, drained, not_drained)."""
        return {"barrier": self.barrier, "entered_at": self.entered_at, "released_at": self.released_at,
                "drained": self.drained, "not_drained": self.not_drained}


def device_synchronize(device: torch.device, timeout_s: float) -> bool:
    """torch.cuda.synchronize(device), waited for at most timeout_s (True: done). The call itself cannot be
    interrupted: past the deadline it is left blocking in a daemon thread and the caller goes on."""
    if device.type != "cuda":
        return True
    done = threading.Event()
    err: list[BaseException] = []

    def run():
        try:
            torch.cuda.synchronize(device)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            err.append(e)
        finally:
            done.set()

    threading.Thread(target=run, name="dwdp-close-sync", daemon=True).start()
    if not done.wait(max(timeout_s, 0.0)):
        return False
    if err:
        raise err[0]
    return True


def close_in_order(*, prefetcher: Any, device: torch.device, group: Any, timeout_s: float, label: str,
                   log: logging.Logger, release_local: Callable[[], None], release_shared: Callable[[], None],
                   after_barrier: Callable[[], None] | None = None, local_only: str | None = None,
                   keep_shared: str | None = None, skip_drain: str | None = None) -> CloseResult:
    """Close one DWDP rank (module docstring: the order), all of it within timeout_s seconds. prefetcher: None when
    none was started; label: the group as the log names it. local_only: why this rank must not wait for its peers
    (the shutdown barrier is skipped with that reason); keep_shared: why the composite view and the transport must
    stay mapped even after a finished drain; skip_drain: why this rank must not wait for its own copies and device
    either (a detected hang: nothing of step 1 runs, the close returns at once)."""
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    not_drained = None
    if skip_drain is not None:  # a hung rank: its copies or kernels may never finish, so nothing waits for them
        not_drained = f"not waited for ({skip_drain}): copies or kernels may still be in flight"
    else:
        try:
            if prefetcher is not None:
                prefetcher.drain(deadline=deadline)
            if not device_synchronize(device, left()):
                not_drained = f"the device did not synchronize within the {timeout_s:g} s shutdown timeout"
        except Exception as e:  # noqa: BLE001 - said, and the barrier still runs
            not_drained = f"{type(e).__name__}: {e}"
    if skip_drain is not None:
        log.warning("dwdp_trtllm: %s: this rank's copies and device were %s", label, not_drained)
    elif not_drained is not None:
        log.warning("dwdp_trtllm: %s: this rank's copies did not finish within the %g s shutdown timeout before its "
                    "shutdown barrier (%s)", label, timeout_s, not_drained)
    entered_at = time.time()
    budget = left()  # what the drain left of the one deadline (at least a moment: close_barrier's floor)
    barrier = close_barrier(group, budget) if local_only is None else \
        BarrierResult((), 0, 0.0, skipped=f"{local_only}: this rank closes without waiting for its peers")
    line = barrier.describe(label, timeout_s)  # the whole close, barrier included, stayed within it
    # a missing peer, or a barrier skipped although there was a group (torch.distributed torn down), is a warning
    quiet = barrier.ok and (barrier.skipped is None or group is None or len(barrier.ranks) == 1)
    (log.info if quiet else log.warning)("dwdp_trtllm: %s", line)
    result = CloseResult(not_drained is None, not_drained, barrier, entered_at)
    try:
        release_local()
        if result.drained and keep_shared is None:
            release_shared()
            result.released_at = time.time()
        elif keep_shared is not None:  # said with its reason, drained or not (a hang: not waited for)
            log.warning("dwdp_trtllm: %s: its composite view and transport (exported buffers, peer mappings) stay "
                        "mapped until the process exits: %s", label, keep_shared)
        else:
            log.error("dwdp_trtllm: %s: this rank's copies did not finish; its composite view and transport "
                      "(exported buffers, peer mappings) stay mapped until the process exits", label)
    finally:
        if after_barrier is not None:
            after_barrier()
    return result
