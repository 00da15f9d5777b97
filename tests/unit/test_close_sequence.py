"""close_sequence.close_in_order: the one close policy of DwdpRuntime.close and AdapterRuntime.close (CPU).

Before it, on a drain failure DwdpRuntime.close skipped the shutdown barrier (its peers waited their whole timeout)
and unmapped its buffers under copies that may still run, while AdapterRuntime.close ran the barrier and left them
mapped. Now both: the barrier runs, the scheduler is closed, the composite view and the transport stay mapped."""
from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import pytest
import torch

from dwdp_trtllm.core import close_sequence
from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.core.runtime import DwdpRuntime
from dwdp_trtllm.core.transport.close_barrier import BarrierResult


class Calls:
    def __init__(self):
        self.seen: list[str] = []

    def barrier(self, group, timeout_s):
        self.seen.append("barrier")
        return BarrierResult((0, 1), 0, 0.0)


class StuckPrefetcher:
    """A prefetcher whose copies do not finish: drain raises as Prefetcher.drain does at its timeout."""

    def drain(self, **kw):
        raise TimeoutError("copies of layer 3 into slot 1 not done after 0.1 s")


class Recorder:
    def __init__(self, calls, name):
        self.calls, self.name = calls, name

    def close(self):
        self.calls.seen.append(self.name)


@pytest.fixture
def calls(monkeypatch):
    c = Calls()
    monkeypatch.setattr(close_sequence, "close_barrier", c.barrier)
    return c


def test_runtime_close_runs_the_barrier_and_keeps_its_buffers_mapped_when_copies_did_not_drain(calls, caplog):
    spec = get_model("tiny", 3, 1)
    cfg = DwdpConfig(dwdp_size=2, transport="shm", weight_dtype="float32")
    rt = DwdpRuntime(cfg, spec, group=None, dwdp_rank=0, device=torch.device("cpu"), tag=f"closeseq{os.getpid()}")
    transport = rt.transport
    try:
        rt.prefetcher, rt.scheduler = StuckPrefetcher(), Recorder(calls, "scheduler")
        rt.transport = Recorder(calls, "transport")
        rt.transport.tag = transport.tag
        with caplog.at_level(logging.INFO, logger="dwdp_trtllm.core.runtime"):
            rt.close()
        assert calls.seen == ["barrier", "scheduler"], calls.seen  # barrier ran; transport not unmapped
        assert not rt.close_result.drained and "layer 3 into slot 1" in rt.close_result.not_drained
        assert rt.close_result.released_at is None
        assert any("stay mapped" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    finally:
        transport.close()


def test_runtime_close_releases_after_the_barrier_when_drained(calls):
    spec = get_model("tiny", 3, 1)
    cfg = DwdpConfig(dwdp_size=2, transport="shm", weight_dtype="float32")
    rt = DwdpRuntime(cfg, spec, group=None, dwdp_rank=0, device=torch.device("cpu"), tag=f"closeseq2{os.getpid()}")
    real = rt.transport
    rt.prefetcher = SimpleNamespace(drain=lambda **kw: calls.seen.append("drain"))
    rt.scheduler = Recorder(calls, "scheduler")
    real_close = real.close
    real.close = lambda: (calls.seen.append("transport"), real_close())
    rt.close()
    assert calls.seen == ["drain", "barrier", "scheduler", "transport"], calls.seen
    assert rt.close_result.drained and rt.close_result.released_at is not None


def test_adapter_close_follows_the_same_policy(calls):
    """AdapterRuntime.close is close_in_order too: same order, the owners' tensors emptied either way."""
    from dwdp_trtllm.integration.adapter import AdapterRuntime
    for stuck in (True, False):
        calls.seen.clear()
        rt = object.__new__(AdapterRuntime)
        owner = torch.nn.Module()
        owner.w = torch.nn.Parameter(torch.ones(2, 3), requires_grad=False)
        rt.owners, rt.names, rt.shapes = [owner], ("w",), {"w": ((3,), torch.float32)}
        rt.views, rt.sources, rt.slots, rt._bound, rt._closed = {}, {}, [], None, False
        rt.device, rt.close_timeout_s, rt.group_label = torch.device("cpu"), 5.0, "DWDP group 0 (t)"
        rt.owns_group = False
        rt.peers = SimpleNamespace(close=lambda: None)  # transport/liveness.PeerWatch: closed with the local state
        rt.prefetcher = StuckPrefetcher() if stuck else SimpleNamespace(drain=lambda **kw: calls.seen.append("drain"))
        rt.scheduler, rt.composite = Recorder(calls, "scheduler"), Recorder(calls, "composite")
        rt.transport = Recorder(calls, "transport")
        rt.close()
        want = ["barrier", "scheduler"] if stuck else ["drain", "barrier", "scheduler", "composite", "transport"]
        assert calls.seen == want, (stuck, calls.seen)
        assert owner.w.numel() == 0 and rt.close_info["drained"] is (not stuck)
        assert (rt.close_info["released_at"] is None) is stuck


class NeverDone:
    """A copy that never finishes (CpuCopyHandle's synchronize contract: TimeoutError after timeout_s)."""

    def __init__(self, layer, slot):
        self.layer, self.slot = layer, slot

    def synchronize(self, timeout_s):
        import threading
        if not threading.Event().wait(timeout_s):
            raise TimeoutError(f"copies of layer {self.layer} into slot {self.slot} not done after {timeout_s} s")

    def done(self):
        return False


def test_the_whole_close_is_bounded_by_its_timeout_and_says_what_was_in_flight(monkeypatch, caplog):
    """Before: Prefetcher.drain waited up to the prefetcher's own timeout_s (300 s in the adapter) per copy in flight,
    then an unbounded synchronize, and only then the barrier got shutdown_timeout_s of its own. Now one deadline:
    two stuck copies and a 0.6 s timeout close in ~0.6 s, the barrier gets what is left, the warning names both."""
    import time
    from dwdp_trtllm.core.prefetcher import Prefetcher
    budgets = []
    monkeypatch.setattr(close_sequence, "close_barrier",
                        lambda g, t: budgets.append(t) or BarrierResult((), 0, 0.0))
    pf = Prefetcher(SimpleNamespace(issue=lambda layer, slot, after=None: NeverDone(layer, slot)), num_layers=3,
                    num_slots=2, device=torch.device("cpu"), timeout_s=300.0)
    pf.start()
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="t"):
        res = close_sequence.close_in_order(prefetcher=pf, device=torch.device("cpu"), group=None, timeout_s=0.6,
                                            label="g", log=logging.getLogger("t"), release_local=lambda: None,
                                            release_shared=lambda: None)
    took = time.monotonic() - t0
    # the deadline held: not before it, and far from the 300 s per copy it replaces (a loaded machine adds seconds)
    assert 0.55 <= took < 30, took
    assert budgets and budgets[0] < 0.1, budgets  # the drain used the deadline up; the barrier got the rest
    assert not res.drained and res.released_at is None
    assert "2 copies still in flight at the deadline: layer 0 into slot 0, layer 1 into slot 1" in res.not_drained
    (warn,) = [r.getMessage() for r in caplog.records if "did not finish within the 0.6 s shutdown timeout" in r.getMessage()]
    assert "layer 1 into slot 1" in warn


def test_device_synchronize_is_bounded(monkeypatch):
    """A CUDA synchronize that does not return (a stuck kernel) is waited for at most the time left."""
    import threading
    import time
    release = threading.Event()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: release.wait(120))
    t0 = time.monotonic()
    assert close_sequence.device_synchronize(torch.device("cuda", 0), 0.3) is False
    assert time.monotonic() - t0 < 60  # the 0.3 s it was given, far from the stuck call's 120 s (margin: load)
    release.set()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    assert close_sequence.device_synchronize(torch.device("cuda", 0), 0.3) is True
    assert close_sequence.device_synchronize(torch.device("cpu"), 0.0) is True


def test_a_skipped_barrier_with_a_group_is_a_warning(monkeypatch, caplog):
    """torch.distributed torn down before close: the barrier could not run although peers exist: WARNING, 'skipped'."""
    with caplog.at_level(logging.INFO, logger="t2"):
        res = close_sequence.close_in_order(prefetcher=None, device=torch.device("cpu"), group=object(), timeout_s=1.0,
                                            label="DWDP group 0 (t)", log=logging.getLogger("t2"),
                                            release_local=lambda: None, release_shared=lambda: None)
    assert res.barrier.skipped and res.released_at is not None
    (rec,) = [r for r in caplog.records if "shutdown barrier" in r.getMessage()]
    assert rec.levelno == logging.WARNING and "shutdown barrier skipped (its process group is gone (torch.distributed torn down" in rec.getMessage()
    assert "ranks reached" not in rec.getMessage()


def test_adapter_close_destroys_the_models_process_group_after_the_barrier(tmp_path):
    """integration/group.py made one gloo group per model and nothing destroyed it (a process serving several models
    kept every one); upstream's DwdpManager.cleanup frees its DWDP communicator (dwdp.py @ 198af04538bc:
    `self.dwdp_group.Free()`).
    Now AdapterRuntime.close destroys the group it owns, after the barrier and the release; one it does not own stays."""
    import torch.distributed as dist
    from dwdp_trtllm.integration.adapter import AdapterRuntime
    from dwdp_trtllm.core.transport.close_barrier import close_barrier

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    try:
        order = []
        for owns in (True, False):
            group = dist.new_group([0])
            rt = object.__new__(AdapterRuntime)
            rt.owners, rt.names, rt.shapes = [], (), {}
            rt.views, rt.sources, rt.slots, rt._bound, rt._closed = {}, {}, [], None, False
            rt.device, rt.close_timeout_s, rt.group_label, rt.owns_group = torch.device("cpu"), 5.0, "g", owns
            rt.prefetcher, rt.composite = None, None
            rt.peers = SimpleNamespace(close=lambda: None)
            rt.scheduler = SimpleNamespace(close=lambda: order.append("scheduler"))
            rt.transport = SimpleNamespace(group=group, close=lambda: order.append(
                ("transport", dist.get_process_group_ranks(group))))  # the group still alive at the release
            rt.close()
            assert rt.close_info["barrier"].skipped == "a group of one rank: no peer"
            alive = group in dist.distributed_c10d._world.pg_map
            assert alive is (not owns), owns
        assert order == ["scheduler", ("transport", [0])] * 2
    finally:
        dist.destroy_process_group()


class DrainedPrefetcher:
    def drain(self, **kw):
        return None


@pytest.mark.parametrize("keep", [None, "a forward may still read them"])
def test_local_close_skips_the_barrier_and_keeps_shared_state_when_asked(calls, caplog, keep):
    """local_only (the executor hung): no barrier call, the result says why; keep_shared (its worker thread still
    runs): the transport is not released although the drain finished, and the log says why."""
    seen = []
    with caplog.at_level(logging.INFO, logger="dwdp_trtllm.test"):
        res = close_sequence.close_in_order(
            prefetcher=DrainedPrefetcher(), device=torch.device("cpu"), group=object(), timeout_s=5.0, label="g",
            log=logging.getLogger("dwdp_trtllm.test"), release_local=lambda: seen.append("local"),
            release_shared=lambda: seen.append("shared"), local_only="the hang detector fired", keep_shared=keep)
    assert calls.seen == []  # the collective barrier never ran
    assert res.barrier.skipped.startswith("the hang detector fired: this rank closes without waiting for its peers")
    assert seen == (["local", "shared"] if keep is None else ["local"])
    assert (res.released_at is None) == (keep is not None)
    if keep is not None:
        assert any("stay mapped until the process exits: a forward may still read them" in r.getMessage()
                   for r in caplog.records)


def test_local_close_reads_the_executors_hang_detector_and_worker_thread(monkeypatch, request):
    """executor_shutdown.local_close on the fake PyExecutor (its hang detector and worker thread as upstream's):
    None on a normal shutdown; the hang named; a live worker thread keeps the shared state mapped. The fake
    tensorrt_llm leaves sys.path and sys.modules with the test (a later test in this process, gen-config's
    installed-version probe among them, must not find it)."""
    import sys
    import threading
    from pathlib import Path
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fakes"))
    before = set(sys.modules)
    from tensorrt_llm._torch.pyexecutor.py_executor import PyExecutor
    fake = [n for n in set(sys.modules) - before if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]
    request.addfinalizer(lambda: [sys.modules.pop(n, None) for n in fake])
    from dwdp_trtllm.integration.executor_shutdown import local_close
    ex = PyExecutor(model_engine=None)
    assert local_close(ex) is None
    ex.hang_detector.fire()
    lc = local_close(ex)
    assert lc.why == "TensorRT-LLM's hang detector fired" and lc.hung
    assert "were not waited for" in lc.keep_shared  # nothing drained, so nothing may be unmapped under it
    stop = threading.Event()
    ex.worker_thread = threading.Thread(target=stop.wait, daemon=True)
    ex.worker_thread.start()
    try:
        assert "worker thread is still running" in local_close(ex).keep_shared
    finally:
        stop.set()


def test_after_a_detected_hang_the_close_returns_without_waiting_for_a_hung_copy(monkeypatch, caplog):
    """TensorRT-LLM's PyExecutor.shutdown returns at once when its hang detector fired (py_executor.py @
    0004396720054fd8). Our local close used to drain the prefetcher and synchronize the device first, bounded only by
    shutdown_timeout_s (here 3600 s): a copy that never finishes beside it held the close for all of it. Now, with
    skip_drain, neither the drain nor the synchronize is entered, no barrier runs and the mappings stay. Event-based:
    the close runs in a thread, and whichever comes first (it returns, or it enters the hung drain / synchronize)
    decides; the hung copy is released at the end either way."""
    import threading
    from dwdp_trtllm.core.prefetcher import Prefetcher
    entered, settled, hung = threading.Event(), threading.Event(), threading.Event()

    class HungCopy(NeverDone):
        def synchronize(self, timeout_s):
            entered.set()
            settled.set()
            hung.wait(timeout_s)  # a copy that does not finish until the test lets it

    def synchronize(device=None):
        entered.set()
        settled.set()
        hung.wait(3600)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(close_sequence, "close_barrier", lambda g, t: entered.set() or BarrierResult((), 0, 0.0))
    pf = Prefetcher(SimpleNamespace(issue=lambda layer, slot, after=None: HungCopy(layer, slot)), num_layers=3,
                    num_slots=2, device=torch.device("cpu"), timeout_s=3600.0)
    pf.start()  # copies of layers 0 and 1 issued, never done
    seen, out = [], {}

    def close():
        try:
            out["res"] = close_sequence.close_in_order(
                prefetcher=pf, device=torch.device("cuda", 0), group=object(), timeout_s=3600.0, label="g",
                log=logging.getLogger("dwdp_trtllm.test"), release_local=lambda: seen.append("local"),
                release_shared=lambda: seen.append("shared"), local_only="TensorRT-LLM's hang detector fired",
                keep_shared="copies were not waited for", skip_drain="TensorRT-LLM's hang detector fired")
        finally:
            settled.set()
    t = threading.Thread(target=close, daemon=True)
    try:
        with caplog.at_level(logging.WARNING, logger="dwdp_trtllm.test"):
            t.start()
            assert settled.wait(300), "the close neither returned nor entered a wait"
            assert not entered.is_set(), "the close waited for the hung copy or the device (or ran the barrier)"
            t.join(300)
    finally:
        hung.set()
    res = out["res"]
    assert not res.drained and "not waited for (TensorRT-LLM's hang detector fired)" in res.not_drained
    assert res.barrier.skipped.startswith("TensorRT-LLM's hang detector fired") and res.released_at is None
    assert seen == ["local"]  # the composite view and the transport stay mapped
    assert any("copies and device were not waited for" in r.getMessage() for r in caplog.records)


def test_adapter_close_after_a_hang_skips_the_drain(calls):
    """AdapterRuntime.close with executor_shutdown's LocalClose for a fired hang detector: no drain, no barrier, the
    scheduler and the owners' tensors left as they are (a hung forward may still use them), nothing released."""
    from dwdp_trtllm.integration.adapter import AdapterRuntime
    from dwdp_trtllm.integration.executor_shutdown import LocalClose
    rt = object.__new__(AdapterRuntime)
    owner = torch.nn.Module()
    owner.w = torch.nn.Parameter(torch.ones(2, 3), requires_grad=False)
    rt.owners, rt.names, rt.shapes = [owner], ("w",), {"w": ((3,), torch.float32)}
    rt.views, rt.sources, rt.slots, rt._bound, rt._closed = {}, {}, [], None, False
    rt.device, rt.close_timeout_s, rt.group_label, rt.owns_group = torch.device("cpu"), 3600.0, "g", False
    rt.peers = SimpleNamespace(close=lambda: calls.seen.append("peers"))
    rt.prefetcher = StuckPrefetcher()  # would raise if drained
    rt.prefetcher.drain = lambda **kw: calls.seen.append("drain")
    rt.scheduler, rt.composite = Recorder(calls, "scheduler"), Recorder(calls, "composite")
    rt.transport = Recorder(calls, "transport")
    rt.close(LocalClose("TensorRT-LLM's hang detector fired", "not waited for", hung=True))
    assert calls.seen == ["peers"], calls.seen
    assert owner.w.numel() == 6 and rt.close_info["drained"] is False and rt.close_info["released_at"] is None
