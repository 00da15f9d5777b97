"""DEP's dispatch all-to-all, timed on the node: one process per GPU (NCCL needs one device per rank; gloo on CPU
for the functional check), `torch.distributed.all_to_all_single` of each rank's dispatch bytes, median of the
repeats on rank 0. `all_to_all_gbps` is the bytes a rank sends to the others per second, what
perf/cost_model.a2a_bps_for prices dispatch and combine with.

Every wait is bounded: the process group's timeout, and the parent's wait for the result and for the processes
(a rank that hangs is killed; the step then fails and the calibration writes nothing). Each rank dies with the
`dwdp calibrate` that started it, as `dwdp bench`'s ranks do (engine/rank_entry.die_with_parent: PR_SET_PDEATHSIG
before any heavy import), and then takes the name dwdp-a2a-rank<r>: a kill -9 of the parent leaves no rank behind.
DeepEP (`deep_ep`) is detected but not timed by this version: its keys stay priors, and the file says so.
"""
from __future__ import annotations

import importlib.util
import queue as queue_mod
import socket
import statistics
from datetime import timedelta
from typing import Protocol

from ..engine.rank_entry import die_with_parent, set_name

#: seconds the parent waits for the ranks' result (start-up included) and the process group's own timeout
WAIT_S = 300.0


class A2aTimer(Protocol):
    backend: str

    def time_ms(self, ranks: int, bytes_per_rank: int) -> float:
        """Median ms of one all-to-all where each rank sends `bytes_per_rank` split evenly over all ranks."""
        ...


def dispatch_bytes(spec, tokens: int, dispatch_dtype_bytes: float) -> int:
    """Bytes one rank's dispatch sends (every token to each of its top_k experts, no dedup), a multiple of 8."""
    return int(tokens * spec.top_k * spec.hidden_size * dispatch_dtype_bytes) // 8 * 8


def deepep_installed() -> bool:
    return importlib.util.find_spec("deep_ep") is not None


def a2a_record(timer: A2aTimer, ranks: int, bytes_per_rank: int) -> dict:
    """{ranks, bytes_per_rank, ms, gbps}: gbps = bytes sent to the other ranks / time."""
    ms = timer.time_ms(ranks, bytes_per_rank)
    return {"ranks": ranks, "bytes_per_rank": bytes_per_rank, "ms": ms,
            "gbps": bytes_per_rank * (ranks - 1) / ranks / ms / 1e6}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(parent_pid: int, rank: int, ranks: int, port: int, device: str, nbytes: int, reps: int, out) -> None:
    die_with_parent(parent_pid)  # first: the imports below take seconds on a loaded machine
    set_name(f"dwdp-a2a-rank{rank}")
    import time

    import torch
    import torch.distributed as dist

    try:
        cuda = device == "cuda"
        if cuda:
            torch.cuda.set_device(rank)
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=ranks, timeout=timedelta(seconds=WAIT_S))
        dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
        send = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=dev)
        recv = torch.empty_like(send)
        samples = []
        for i in range(reps + 2):  # two warm-ups (communicator set-up, first touch)
            dist.barrier()
            t = time.perf_counter()
            dist.all_to_all_single(recv, send)
            if cuda:
                torch.cuda.synchronize(dev)
            if i >= 2:
                samples.append((time.perf_counter() - t) * 1e3)
        if not torch.equal(recv[:nbytes // ranks].cpu(), send[:nbytes // ranks].cpu()) and rank == 0:
            raise RuntimeError("all_to_all_single: rank 0's own chunk came back changed")
        dist.destroy_process_group()
        if rank == 0:
            out.put(("ok", statistics.median(samples)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the step
        out.put(("error", f"rank {rank}: {type(e).__name__}: {e}"))


class SpawnA2aTimer:
    """A2aTimer with one spawned process per rank: NCCL on cuda, gloo on cpu (functional check)."""

    def __init__(self, device: str, *, reps: int = 5):
        self.device, self.reps = device, reps
        self.backend = "nccl" if device == "cuda" else "gloo"

    def time_ms(self, ranks: int, bytes_per_rank: int) -> float:
        import os

        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        nbytes = bytes_per_rank // ranks * ranks
        port = _free_port()
        procs = [ctx.Process(target=_worker, args=(os.getpid(), r, ranks, port, self.device, nbytes, self.reps, out), daemon=True)
                 for r in range(ranks)]
        status, value = "error", "interrupted"
        for p in procs:
            p.start()
        try:
            status, value = out.get(timeout=WAIT_S)
        except queue_mod.Empty:
            status, value = "error", f"no result from the {ranks} ranks within {WAIT_S:g} s"
        finally:
            for p in procs:
                p.join(timeout=10.0 if status == "ok" else 1.0)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5.0)
        if status != "ok":
            raise RuntimeError(f"{self.backend} all-to-all: {value}")
        return float(value)
