"""Which peers of a DWDP group have exited, asked without waiting (one poll of a pidfd per peer).

A dead peer is decided per transport (PeerTransport.keeps_peer_memory):
- shm: our read-only mapping keeps the pages of the peer's (already unlinked) segment; vmm_fd / vmm_fabric: the
  imported allocation handle holds a reference on the peer's physical memory (CUDA VMM frees an allocation when its
  last handle is released). The survivor keeps computing from that memory, bit-exact; the host says once that the
  peer is gone (it has no way to come back: the group cannot be re-formed while serving);
- ipc (legacy CUDA IPC): nothing promises that an exporter's memory outlives it, so a copy from it is refused: the
  host raises a named error before the next layer uses its slot, and on every later forward.
Peers are same-node processes (the transports map peer memory of one host; fabric handles across nodes have no pid
we can watch: their peers are never reported dead here). pidfds do not suffer pid reuse; without pidfd_open (Linux
< 5.3) a kill(pid, 0) probe stands in.
"""
from __future__ import annotations

import logging
import os
import select

from . import group_ops
from .pidfd import PidfdError, pidfd_open


class PeerLost(RuntimeError):
    """A peer whose memory this rank reads has exited and its transport does not keep that memory: no copy from it
    may run. The message names the group, the dwdp rank, the global rank and the pid."""


class PeerLiveness:
    """Watches the processes of the given peers (dwdp rank -> pid, same node) from construction on."""

    def __init__(self, pids: dict[int, int]):
        self.pids = dict(pids)
        self._fds: dict[int, int] = {}
        self._poll = select.poll()
        for rank, pid in self.pids.items():
            try:
                fd = pidfd_open(pid)
            except PidfdError:
                continue  # probed with kill(pid, 0) instead
            self._fds[rank] = fd
            self._poll.register(fd, select.POLLIN)

    def dead(self) -> dict[int, int]:
        """{dwdp rank: pid} of the peers that have exited (no wait)."""
        out: dict[int, int] = {}
        by_fd = {fd: r for r, fd in self._fds.items()}
        for fd, _ in self._poll.poll(0):
            out[by_fd[fd]] = self.pids[by_fd[fd]]
        for rank, pid in self.pids.items():
            if rank not in self._fds:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    out[rank] = pid
                except PermissionError:
                    pass  # alive, owned by another user
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._poll = select.poll()


class PeerWatch:
    """The dead-peer policy of a rank's transport (module docstring), asked by the host before a layer uses its slot.

    check(forward_start): where the transport does not keep peer memory, at every layer: a dead peer raises PeerLost,
    and so does every later call (never a forward on stale memory); where it does, at each forward's start only
    (one poll per forward): each dead peer is said once as a warning, and the rank goes on."""

    def __init__(self, transport, label: str, log: logging.Logger):
        self.transport, self.label, self.log = transport, label, log
        self.liveness = PeerLiveness(transport.peer_pids)
        self.lost: str | None = None
        self._said: set[int] = set()

    def _who(self, dead: dict[int, int]) -> str:
        ranks = group_ops.members(self.transport.group)
        return "; ".join(f"dwdp rank {r} ({self.label}" + (f", global rank {ranks[r]}" if r < len(ranks) else "")
                         + f", pid {pid})" for r, pid in sorted(dead.items()))

    def check(self, *, forward_start: bool) -> None:
        if self.lost is not None:
            raise PeerLost(self.lost)
        keeps = self.transport.keeps_peer_memory
        if keeps and not forward_start:
            return
        dead = self.liveness.dead()
        if not dead:
            return
        if not keeps:
            self.lost = (f"dwdp_trtllm: {self._who(dead)} exited while serving; transport {self.transport.kind} does "
                         "not keep a peer's memory after it exits, so no copy from it is used: restart the DWDP "
                         "group's context servers")
            self.log.error("%s", self.lost)
            raise PeerLost(self.lost)
        new = {r: p for r, p in dead.items() if r not in self._said}
        if new:
            self._said |= set(new)
            self.log.warning("dwdp_trtllm: %s exited while serving; transport %s keeps the memory this rank imported, "
                             "so it goes on computing bit-exact from it; the group's shutdown will not wait for it",
                             self._who(new), self.transport.kind)

    def close(self) -> None:
        self.liveness.close()
