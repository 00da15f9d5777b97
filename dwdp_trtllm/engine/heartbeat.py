"""Rank heartbeats: how the parent names a rank that hangs (alive, not stopped, making no progress).

A rank that dies is named by its exit; a hung one never exits, and when it hangs the others soon wait for it in a
collective (DEP every layer, DWDP at its close barrier), so "which ranks did not finish" names them all. Each rank
therefore runs a heartbeat thread (`Heartbeat`, started by engine/rank_entry.py) that sends, every `BEAT_S`
seconds, the mode and iteration its main thread is in (`Heartbeat.iteration`, set by the worker's loop through
rank_entry) and whether the main thread waits for peers: a frame of torch.distributed or of our close barrier on
its stack. The parent (engine/launcher.py) keeps each rank's last beat (`Beats`) and, when the run times out or a
peer's collective fails, `Beats.hung` names the rank(s) that either stopped beating (a hang holding the GIL, a
process the kernel stopped) or beat while not waiting for anybody although the others wait: by the beat they missed.
Such a rank hung when its beats have said the same place (mode, iteration, frame) for `STUCK_S`; one that still moves
(importing, loading weights on a loaded machine) is named as behind, not hung.

Importable without torch (rank_entry imports it before the rank's heavy imports).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

#: seconds between two beats of a rank
BEAT_S = 1.0
#: a rank whose last beat is older than this has missed its beats (a loaded 2-core machine delays a beat by seconds)
MISSED_AFTER_S = 6.0
#: a rank whose beats say the same place this long, while its peers wait for it, hung
STUCK_S = 10.0
#: frames of these files on the main thread's stack mean "waiting for peers"
_WAITING = (os.path.join("torch", "distributed", ""), os.path.join("transport", "close_barrier.py"),
            os.path.join("engine", "ipc_a2a.py"))
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main_thread_state() -> tuple[bool, str]:
    """(waiting for peers, where): the main thread's stack, read from another thread. where: the innermost frame of
    this package (file relative to it, line, function), else the innermost frame."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    waiting = any(w in f.f_code.co_filename for f in frames for w in _WAITING)
    ours = [f for f in frames if f.f_code.co_filename.startswith(_PACKAGE + os.sep)]
    if not (ours or frames):
        return waiting, "unknown"
    f = (ours or frames)[0]
    path = f.f_code.co_filename
    shown = os.path.relpath(path, os.path.dirname(_PACKAGE)) if ours else path
    where = f"{shown}:{f.f_lineno} {f.f_code.co_name}"
    return waiting, where


class Heartbeat:
    """A rank's heartbeat thread: send(("beat", rank, mode, iteration, waiting, where)) every period_s until stop().
    send must be safe to call from two threads (rank_entry's locked connection)."""

    def __init__(self, rank: int, send, period_s: float = BEAT_S):
        self.rank, self._send, self._period = rank, send, period_s
        self.mode: str | None = None
        self.iteration = -1  # -1: before the first iteration of `mode` (loading weights, warm-up, setup)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dwdp-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def at(self, mode: str, iteration: int) -> None:
        """The main thread is in `iteration` of `mode` now."""
        self.mode, self.iteration = mode, iteration

    def _run(self) -> None:
        while True:  # the first beat at once
            waiting, where = main_thread_state()
            try:
                self._send(("beat", self.rank, self.mode, self.iteration, waiting, where))
            except (OSError, ValueError):  # the parent is gone or the pipe closed: nobody to tell
                return
            if self._stop.wait(self._period):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._period)


@dataclass
class Beat:
    mode: str | None
    iteration: int
    waiting: bool
    where: str
    at: float  # time.monotonic() in the parent when it arrived
    since: float  # when the rank's beats first said this place (mode, iteration, where)

    def place(self) -> tuple:
        return self.mode, self.iteration, self.where


class Beats:
    """The parent's view: the last beat of every rank (started_at: time.monotonic() when the ranks were started)."""

    def __init__(self, started_at: float):
        self.started_at = started_at
        self.last: dict[int, Beat] = {}

    def record(self, rank: int, mode, iteration: int, waiting: bool, where: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        prev = self.last.get(rank)
        since = prev.since if prev is not None and prev.place() == (mode, iteration, where) else now
        self.last[rank] = Beat(mode, iteration, waiting, where, now, since)

    def hung(self, candidates: list[int], now: float | None = None) -> "Hang | None":
        """The rank(s) among `candidates` (alive, not finished) that hang, each named by the beat it missed; None when
        the beats name nobody (every candidate beats and waits for peers, or no rank waits at all). A rank waits when
        its last beat, still fresh, was sent from inside a collective (a finished rank at its final barrier too)."""
        now = time.monotonic() if now is None else now
        hung = []
        for r in candidates:
            b = self.last.get(r)
            since = now - (b.at if b is not None else self.started_at)
            if since > MISSED_AFTER_S:
                hung.append((r, f"it missed its first heartbeat (none in {since:.1f} s since the start)" if b is None
                             else f"it missed its heartbeats of the last {since - BEAT_S:.1f} s (its last: "
                                  f"{_place(b)}, in {b.where})"))
        waiting = sorted(r for r, b in self.last.items() if b.waiting and now - b.at <= MISSED_AFTER_S)
        behind = []
        if waiting:  # a rank that beats while nobody waits for it is merely slow
            for r in candidates:
                b = self.last.get(r)
                if r in waiting or r in dict(hung) or b is None:
                    continue
                if now - b.since >= STUCK_S:
                    hung.append((r, f"it missed the heartbeat of {_next(b)} (its last: {_place(b)}, in {b.where} for "
                                    f"{now - b.since:.0f} s, not waiting for a peer)"))
                else:
                    behind.append((r, f"{_place(b)}, in {b.where}, still moving, not waiting for a peer"))
        return Hang(sorted(hung), waiting, sorted(behind)) if hung or behind else None


@dataclass(frozen=True)
class Hang:
    """hung: (rank, why) per hung rank; waiting: the ranks that wait in a collective; behind: (rank, where) per rank
    the others wait for that still moves (slow, not hung)."""
    hung: list[tuple[int, str]]
    waiting: list[int]
    behind: list[tuple[int, str]] = ()

    def reasons(self) -> str:
        parts = ([f"rank {r} hung: {why}" for r, why in self.hung]
                 + [f"rank {r} is behind: {why}" for r, why in self.behind])
        return "; ".join(parts) + (f"; rank(s) {self.waiting} wait in a collective" if self.waiting else "")


def _place(b: Beat) -> str:
    return (f"iteration {b.iteration} of mode {b.mode}" if b.iteration >= 0
            else f"setting up mode {b.mode}" if b.mode else "starting")


def _next(b: Beat) -> str:
    return f"iteration {b.iteration + 1} of mode {b.mode}" if b.mode else "its first iteration"
