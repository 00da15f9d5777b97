"""The barrier before a rank releases its transport: every peer of the DWDP group has stopped reading our buffers.

A peer copies from our exported buffers until its own prefetcher is drained; releasing them earlier frees memory a
peer is still reading (CUDA IPC: undefined behaviour once the exporter frees; shm / VMM keep the pages until the
peer unmaps, but a copy that outlives the owner's release reads a buffer nobody owns any more). So every rank, after
draining its own copies, waits until every peer has drained too, then releases.

The wait is bounded: each rank sends one token to every peer and waits for every peer's token until one deadline
(gloo point-to-point on the DWDP group, the group the transport exchanged handles on; a dedicated tag keeps it apart
from other traffic). A peer whose token does not come (alive but not shutting down) is reported after `timeout_s`;
a peer whose process is gone (the connection closed) as soon as that is known. The caller then releases anyway with a
warning that names the group and the missing ranks: shutdown must not hang on a dead peer. Nothing here raises for a
missing peer.

A gloo wait that times out closes that peer's connection ("Application timeout caused pair closure"): the late peer,
once it arrives, finds the connection closed and leaves at once (it does not wait its own timeout), naming the rank
that stopped waiting; and the group carries no more traffic between those two ranks. Its callers use the group for
nothing after close (DwdpRuntime.close, AdapterRuntime.close; a second TensorRT-LLM model gets new groups from
integration/group.py), so the barrier runs once per group.

Shape legend: none (one 1-byte token per peer).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch

from . import group_ops

#: gloo tag of the close tokens (any constant other traffic of the group does not use; its collectives use none)
CLOSE_TAG = 0x5D7C


@dataclass(frozen=True)
class BarrierResult:
    """What close_barrier saw: the group's global ranks, this rank's index in it, the seconds it waited and the
    peers (dwdp rank -> why) that did not arrive. ok: no peer is missing; skipped: why no barrier ran at all (no
    group, torch.distributed torn down, no peer), None when it ran."""

    ranks: tuple[int, ...]
    me: int
    waited_s: float
    missing: dict[int, str] = field(default_factory=dict)
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return not self.missing

    def describe(self, label: str, timeout_s: float) -> str:
        """One line for the log: the group, who was missing and why (or that all arrived), in how long."""
        if self.skipped is not None:
            return f"{label}: shutdown barrier skipped ({self.skipped})"
        where = f"{label} (global ranks {list(self.ranks)}, this rank dwdp {self.me})"
        if self.ok:
            return f"{where}: all {len(self.ranks)} ranks reached the shutdown barrier in {self.waited_s:.2f} s"
        who = "; ".join(f"dwdp rank {p} (global rank {self.ranks[p]}): {why}" for p, why in sorted(self.missing.items()))
        return (f"{where}: {len(self.missing)} of {len(self.ranks) - 1} peers not seen at the shutdown barrier within "
                f"{timeout_s:g} s ({who}); releasing this rank's buffers anyway after {self.waited_s:.2f} s (a peer still "
                "copying from them would read released memory)")


def _short(e: BaseException) -> str:
    """Why a peer's token did not come, from gloo's error: timed out, or its connection lost (with gloo's words,
    its source location and advice cut). A lost connection means the peer's process is gone OR the peer reached the
    barrier earlier and stopped waiting at its own timeout (gloo closes the connection then): both are said."""
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "Timed out" in msg:
        return "did not arrive (timed out)"
    msg = re.sub(r"^\[[^\]]*\]\s*", "", msg).split(". This is typically")[0][:160]
    if "closed" in msg or "reset" in msg or "Broken pipe" in msg:
        return f"connection lost: its process exited, or it stopped waiting at its own timeout ({msg})"
    return f"{type(e).__name__}: {msg}"


def close_barrier(group, timeout_s: float) -> BarrierResult:
    """Wait (at most timeout_s seconds in all) until every other rank of `group` (a gloo ProcessGroup over the DWDP
    group's ranks, in dwdp rank order) called close_barrier too. Never raises for a missing peer: the result says who.
    group: a registered ProcessGroup or a group_ops.PrivateGroup. No group (None), its process group gone
    (torch.distributed torn down, a private group destroyed) or a group of one: nothing is waited for, and the result
    says so (skipped), never that every rank arrived."""
    if group is None:
        return BarrierResult((), 0, 0.0, skipped="no process group: a single rank, or none was given")
    pg = group_ops.process_group(group)
    if pg is None:
        return BarrierResult((), 0, 0.0, skipped="its process group is gone (torch.distributed torn down, or the "
                                                 "group destroyed already): peers that still copy from this rank are "
                                                 "not waited for")
    ranks = group_ops.members(group)
    me = pg.rank()
    if len(ranks) <= 1:
        return BarrierResult(ranks, me, 0.0, skipped="a group of one rank: no peer")
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    token = torch.ones(1, dtype=torch.uint8)
    sends, recvs, missing = {}, {}, {}
    for p in range(len(ranks)):
        if p == me:
            continue
        try:  # the group's own methods take group ranks (transport/group_ops.py: registered or private group)
            sends[p] = pg.send([token], p, CLOSE_TAG)
            recvs[p] = pg.recv([torch.zeros(1, dtype=torch.uint8)], p, CLOSE_TAG)
        except Exception as e:  # noqa: BLE001 - a peer whose connection is gone is reported, not raised
            missing[p] = _short(e)

    def wait(work) -> str | None:
        try:
            work.wait(timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
            return None
        except Exception as e:  # noqa: BLE001 - reported
            return _short(e)

    for p, work in recvs.items():  # the peer's token: it drained its copies from us
        why = wait(work)
        if why is not None:
            missing.setdefault(p, why)
    for p, work in sends.items():  # ours written out before we go on (a peer told nothing would wait its timeout)
        if p not in missing:
            why = wait(work)
            if why is not None:
                missing[p] = why
    return BarrierResult(ranks, me, time.monotonic() - t0, missing)
