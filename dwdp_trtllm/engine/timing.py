"""Per-phase timing of a forward pass: perf_counter on CPU, CUDA events on GPU, no sync inside the pass."""
from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator

import torch


class PhaseTimer:
    """Collects (phase, layer, start_s, end_s) for one iteration.

    On CUDA, `phase()` records events on the current stream; `collect()` (end of iteration, one
    synchronize) converts them to host seconds using a reference event taken at `start()`.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._spans: list[tuple[str, int, object, object]] = []
        self._host: list[tuple[str, int, float, float]] = []
        self._ref_event = None
        self._ref_host = 0.0

    def start(self) -> None:
        self._spans.clear()
        self._host.clear()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._ref_event = torch.cuda.Event(enable_timing=True)
            self._ref_event.record()
            self._ref_host = time.perf_counter()

    @contextmanager
    def phase(self, name: str, layer: int = -1) -> Iterator[None]:
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            yield
            b.record()
            self._spans.append((name, layer, a, b))
        else:
            t = time.perf_counter()
            yield
            self._host.append((name, layer, t, time.perf_counter()))

    def mark(self, name: str, layer: int, start_s: float, end_s: float) -> None:
        """Add a span measured elsewhere on the host clock (e.g. a CPU copy thread)."""
        self._host.append((name, layer, start_s, end_s))

    def mark_events(self, name: str, layer: int, a: object, b: object) -> None:
        """Add a span delimited by two CUDA events recorded on any stream of this device."""
        self._spans.append((name, layer, a, b))

    def collect(self) -> list[tuple[str, int, float, float]]:
        out = list(self._host)
        if self.cuda and self._spans:
            torch.cuda.synchronize(self.device)
            ref = self._ref_event
            for name, layer, a, b in self._spans:
                s = self._ref_host + ref.elapsed_time(a) / 1e3  # type: ignore[union-attr]
                e = self._ref_host + ref.elapsed_time(b) / 1e3  # type: ignore[union-attr]
                out.append((name, layer, s, e))
        out.sort(key=lambda x: x[2])
        return out


def phase(timer: PhaseTimer | None, name: str, layer: int = -1) -> AbstractContextManager:
    """timer.phase(name, layer), or a no-op context when the pass is not timed."""
    return timer.phase(name, layer) if timer is not None else nullcontext()
