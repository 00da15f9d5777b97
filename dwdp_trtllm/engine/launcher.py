"""Start N ranks on this machine, run one mode, collect RankResults; fail fast and clean.

- Ranks are spawned processes (torch.multiprocessing, start method "spawn"), one per rank; on CUDA
  rank r uses GPU r % device_count (several ranks may share a GPU for functional runs). Each rank dies
  with this process (engine/rank_entry.py: PR_SET_PDEATHSIG before any heavy import).
- Each rank reports over its own pipe (no queue: a queue's named semaphores would outlive a group kill);
  the end of a pipe tells that its rank is gone, and every message it sent before is read first.
- Rendezvous: a TCP store on 127.0.0.1 at a free port; default group gloo (control + CPU tensors).
- If a rank raises, it reports its traceback and exits; the parent then terminates every other rank
  within `grace_s`, removes leftover /dev/shm segments of the run and raises RankFailed naming the rank
  that caused it: one that died by a signal without a report is the cause, the errors other ranks raised
  after it (a peer's connection reset) its consequences. A run past run.timeout_s is ended the same way
  (RankTimeout, naming the ranks stopped, else the hung rank by the heartbeat it missed: engine/heartbeat.py);
  a rank alive and silent while its peers' collectives failed is named the same way. An interrupt (Ctrl-C,
  SIGTERM) stops the ranks at once.
- The ranks' stderr goes to a temporary file (engine/rank_entry.py): after a finished run it is printed, after a
  failed one it goes into the failure's text below its paragraph (the CLI's failure log), so the paragraph
  comes first and alone.
- Under torchrun/mpirun (rank/world in the environment) `run_in_process` runs this process's rank.
"""
from __future__ import annotations

import datetime
import glob
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
import traceback
import uuid
from typing import Callable

import torch.multiprocessing as mp
from multiprocessing import resource_tracker
from multiprocessing.connection import wait as wait_any

from .. import env
from ..deploy import host_resources
from ..spec.config import BenchConfig
from ..spec.schema import ConfigError
from ..core.transport.shm import owner_tag, sweep_orphaned
from .heartbeat import Beats
from .rank_entry import RankStderr, main as rank_main
from .records import RankResult, Request


class RankFailed(RuntimeError):
    """A rank failed; carries its rank, formatted traceback (or how it died) and a one-paragraph summary."""

    def __init__(self, rank: int, mode: str, tb: str, summary: str | None = None):
        self.rank, self.tb = rank, tb
        last = tb.strip().splitlines()[-1] if tb.strip() else "unknown error"
        self.summary = f"rank {rank} failed in mode {mode}: {summary or last}"
        super().__init__(f"{self.summary}\n--- rank {rank} traceback ---\n{tb}")


class RankTimeout(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (signal {-exitcode})"
    return f"exited with code {exitcode}"


def _stopped(pid: int | None) -> bool:
    try:
        import psutil
        return pid is not None and psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except Exception:  # noqa: BLE001 - a best-effort diagnosis only
        return False


def _cleanup_shm(tag: str) -> list[str]:
    """Unlink the run's segments left by ranks that could not (killed, or stopped before closing), and make the
    resource tracker the ranks share with this process forget each name: register + unregister, which it accepts
    whether or not the rank had registered it (an unregister alone of a name it never heard of prints a KeyError
    traceback from the tracker; transport/shm.py registers before creating, so normally it knows)."""
    leftovers = glob.glob(f"/dev/shm/{tag}*")
    for p in leftovers:
        try:
            os.unlink(p)
        except OSError:
            continue
        try:
            name = "/" + os.path.basename(p)
            resource_tracker.register(name, "shared_memory")
            resource_tracker.unregister(name, "shared_memory")
        except Exception:  # noqa: BLE001 - no tracker to tell: nothing to forget
            pass
    return leftovers


def _last_line(tb: str) -> str:
    line = tb.strip().splitlines()[-1]
    return line if len(line) <= 200 else line[:197] + "..."


def describe_failure(rank: int, exitcode: int | None, reports: dict[int, str],
                     oom_before: tuple[int | None, ...] | None = None) -> str:
    """One paragraph: how `rank` died (SIGBUS / SIGKILL: what /dev/shm and memory say of it), then the errors the
    other ranks reported as its consequences."""
    after = "; ".join(f"rank {k}: {_last_line(v)}" for k, v in sorted(reports.items()) if k != rank and v.strip())
    cause = host_resources.signal_cause(-exitcode, oom_before) if exitcode is not None and exitcode < 0 else None
    return (f"it {_how(exitcode)} without reporting an error" + (f" ({cause})" if cause else "")
            + (f"; then, as a consequence: {after}" if after else ""))


def run_mode(cfg: BenchConfig, mode: str, requests_per_rank: list[list[Request]], *,
             progress: Callable[[int, int, int], None] | None = None, **kwargs) -> list[RankResult]:
    """Run `mode` on cfg.run.ranks local processes; one RankResult per rank, ordered by rank."""
    prog = (lambda rank, m, done, total: progress(rank, done, total)) if progress is not None else None
    return run_modes(cfg, [mode], requests_per_rank, progress=prog, **kwargs)[mode]


def run_modes(cfg: BenchConfig, modes: list[str], requests_per_rank: list[list[Request]], *,
              progress: Callable[[int, str, int, int], None] | None = None, grace_s: float = 10.0,
              collect_outputs: bool = False, fail_at: tuple[int, int] | None = None,
              popularity_LE=None) -> dict[str, list[RankResult]]:
    """Run each mode in turn on the same cfg.run.ranks processes (one spawn for all modes).

    progress(rank, mode, requests done, total) is called in this process. fail_at=(rank, iteration) makes that
    rank raise at that iteration, (rank, iteration, "hang") hang there (tests of the failure paths). popularity_LE:
    the routing skew's popularity per MoE layer (bench/sweep.py SweepPoint.popularity_LE, from the counts file read once); None with
    the skew on: computed here, in this process; the ranks are handed it and read no counts file.
    """
    world = cfg.run.ranks
    if len(requests_per_rank) != world:
        raise ValueError(f"requests_per_rank has {len(requests_per_rank)} queues for {world} ranks")
    popularity_LE = skew_popularity(cfg, popularity_LE)
    sweep_orphaned()  # segments of runs this process can prove dead (transport/shm.py: never another pid namespace's)
    sweep_orphaned(tempfile.gettempdir())  # the ranks' stderr files of such runs (rank_entry.RankStderr)
    oom_before = host_resources.oom_kills()  # a rank later killed by SIGKILL: did the OOM killer act meanwhile?
    tag = owner_tag(uuid.uuid4().hex[:8])
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs, conns, ends = [], [], []
    rank_stderr = RankStderr(tag)  # the ranks' stderr (module docstring)
    results: dict[tuple[str, int], RankResult] = {}
    reports: dict[int, str] = {}
    live: dict = {}  # open pipe -> its rank
    failure: BaseException | None = None
    beats = Beats(time.monotonic())

    def handle(msg) -> None:
        nonlocal failure
        kind, rank, mode = msg[0], msg[1], msg[2]
        if kind == "beat":
            beats.record(rank, mode, *msg[3:6])
            if len(beats.last) == world:  # every rank beat, so every rank has opened the stderr file
                rank_stderr.forget_name()
        elif kind == "ok":
            results[(mode, rank)] = pickle.loads(msg[3])
        elif kind == "progress":
            if progress is not None:
                progress(rank, mode, msg[3], msg[4])
        elif kind == "config_error":
            failure = failure or ConfigError(*msg[3])
        else:
            reports[rank] = msg[3]
            last = msg[3].strip().splitlines()[-1] if msg[3].strip() else ""
            cause = host_resources.error_cause(last)  # an allocation that failed: what memory is left, now
            failure = failure or RankFailed(rank, ",".join(modes), msg[3], summary=f"{last} ({cause})" if cause else None)

    def read_one(c) -> None:
        try:
            msg = c.recv()
        except (EOFError, OSError):  # the pipe's end: its rank is gone
            del live[c]
            c.close()
            return
        handle(msg)

    def read(timeout: float) -> None:
        """Handle every message that arrives within `timeout`."""
        if not live:
            time.sleep(timeout)
        for c in wait_any(list(live), timeout=timeout) if live else ():
            read_one(c)

    def read_all_of(rank: int) -> None:
        """A rank that exited: everything it sent is in its pipe, read up to the end (a pipe some child of the
        rank still holds open is given up after a second)."""
        c = conns[rank]
        while c in live:
            if not c.poll(1.0):
                del live[c]
                c.close()
                return
            read_one(c)

    def culprit(first: BaseException) -> BaseException:
        """The first rank that died on its own (a signal, or an exit without a report) is the cause; errors the
        others reported after it (a peer's connection reset, say) are its consequences."""
        if isinstance(first, ConfigError):
            return first
        end = time.monotonic() + 0.5  # let ranks that died at the same moment be reaped, their reports read
        while time.monotonic() < end:
            read(0.05)
        for r, p in enumerate(procs):
            if p.exitcode is not None:
                read_all_of(r)
        # a rank that raised always reports; one killed by a signal cannot: that one is the cause
        silent = [(r, p.exitcode) for r, p in enumerate(procs) if (p.exitcode or 0) < 0 and r not in reports]
        if silent:
            return died_unreported(*silent[0])
        # the others' collectives timed out (or lost their connection) while a rank that never reported lives on:
        # the heartbeats say whether it hangs
        alive = [r for r, p in enumerate(procs) if p.exitcode is None and r not in reports]
        hang = beats.hung(alive) if alive and reports else None
        if hang is None or not hang.hung:
            return first
        after = "; ".join(f"rank {k}: {_last_line(v)}" for k, v in sorted(reports.items()) if v.strip())
        rank, why = hang.hung[0]
        return RankFailed(rank, ",".join(modes), hang.reasons(), summary=f"it hung: {why}" + "".join(
            f"; rank {r} hung too: {w}" for r, w in hang.hung[1:]) + (f"; then, as a consequence: {after}" if after else ""))

    def died_unreported(r: int, code: int) -> RankFailed:
        return RankFailed(r, ",".join(modes), f"rank {r} {_how(code)} without reporting an error",
                          summary=describe_failure(r, code, reports, oom_before))

    done = False
    try:
        for r in range(world):
            recv, send = ctx.Pipe(duplex=False)
            payload = pickle.dumps((r, world, port, cfg, list(modes), requests_per_rank[r], tag, fail_at,
                                    collect_outputs, popularity_LE))
            procs.append(ctx.Process(target=rank_main, args=(os.getpid(), r, send, payload, rank_stderr.path), daemon=True,
                                     name=f"dwdp-rank{r}"))
            conns.append(recv)
            ends.append(send)
        for p in procs:
            p.start()
        for c, send in zip(conns, ends):
            send.close()  # the rank holds the write end now: the pipe ends when the rank does
        live.update({c: r for r, c in enumerate(conns)})
        deadline = time.monotonic() + cfg.run.timeout_s * len(modes)
        expected = world * len(modes)
        while len(results) < expected and failure is None:
            read(0.2)
            for r, p in enumerate(procs):
                if failure is None and p.exitcode is not None:
                    read_all_of(r)  # its error report (if any) first
                    unfinished = [m for m in modes if (m, r) not in results]
                    if failure is None and unfinished and p.exitcode != 0:
                        failure = died_unreported(r, p.exitcode)
                    elif failure is None and unfinished:
                        failure = RankFailed(r, ",".join(modes), f"rank {r} exited (code 0) before finishing mode(s) "
                                             f"{unfinished}", summary=f"it exited (code 0) before finishing {unfinished}")
            if failure is None and time.monotonic() > deadline:
                missing = sorted({r for r in range(world) for m in modes if (m, r) not in results})
                stopped = [r for r in missing if _stopped(procs[r].pid)]
                hang = None if stopped else beats.hung(missing)
                why = (f"rank(s) {stopped} are stopped (SIGSTOP / job control), the others wait for them"
                       if stopped else hang.reasons() if hang else f"ranks {missing} did not finish")
                failure = RankTimeout(f"modes {modes}: no result within run.timeout_s={cfg.run.timeout_s} per mode: {why}")
        if failure is not None:
            failure = culprit(failure)
        done = True
    finally:
        # finished: give the ranks grace_s to leave on their own; failed: 1 s; interrupted: stop them now
        _stop(procs, grace_s if done and failure is None else 1.0 if done else 0.0)
        for c in conns + ends:
            c.close()
        _cleanup_shm(tag)
        said = rank_stderr.take()
    if failure is not None:
        if said and isinstance(failure, (RankFailed, RankTimeout)):  # into the failure log, after the paragraph
            failure.args = (f"{failure.args[0]}\n--- ranks' stderr ---\n{said}",)
        raise failure
    if said:
        sys.stderr.write(said)
    return {m: [results[(m, r)] for r in range(world)] for m in modes}


def _stop(procs, grace_s: float) -> None:
    end = time.monotonic() + grace_s
    for p in procs:
        if p.pid is not None:
            p.join(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is None:
            continue
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=2.0)


def skew_popularity(cfg: BenchConfig, popularity_LE=None):
    """The popularity table the ranks steer routing to: popularity_LE when the caller computed it, else (skew on)
    routing_skew.popularity_table here, in the parent (a counts file is read here, never in a rank); None: off."""
    skew = cfg.workload.routing_skew
    if skew.off or popularity_LE is not None:
        return None if skew.off else popularity_LE
    from ..spec.routing_skew import popularity_table

    spec = cfg.model.spec()
    return popularity_table(skew, spec.num_moe_layers, spec.num_experts, spec.top_k)


def run_in_process(cfg: BenchConfig, mode: str, requests_per_rank: list[list[Request]], *,
                   popularity_LE=None) -> list[RankResult] | None:
    """Under torchrun/mpirun: run this process's rank; rank 0 returns all results, others None. popularity_LE: as
    run_modes'."""
    import torch.distributed as dist

    from .worker import run_rank

    le = env.launch_env()
    if le is None:
        raise RuntimeError("run_in_process needs RANK/WORLD_SIZE (torchrun) or OMPI_COMM_WORLD_* (mpirun)")
    rank, world = le["rank"], le["world_size"]
    if world != cfg.run.ranks:
        raise RuntimeError(f"launched with {world} ranks but run.ranks is {cfg.run.ranks}")
    env.set_multicast_off()
    if not dist.is_initialized():
        if env.launched_by_mpi() and "MASTER_ADDR" not in os.environ:
            from mpi4py import MPI  # only when launched by mpirun
            port = MPI.COMM_WORLD.bcast(_free_port() if rank == 0 else None, root=0)
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=cfg.run.timeout_s))
    tag = f"dwdp_{os.environ.get('MASTER_PORT', 'x')}_{mode}"
    try:
        res = run_rank(cfg, mode, requests_per_rank[rank], rank=rank, world=world, tag=tag,
                       popularity_LE=skew_popularity(cfg, popularity_LE))
    except BaseException:
        if env.launched_by_mpi():
            traceback.print_exc()
            from mpi4py import MPI
            MPI.COMM_WORLD.Abort(1)  # bring every rank down with this one
        raise
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(res, gathered, dst=0)
    return gathered if rank == 0 else None
