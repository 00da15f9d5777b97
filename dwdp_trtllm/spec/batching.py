"""Per-rank context batching: FCFS with chunked prefill up to max_num_tokens per iteration (pure, CPU; core).

Every rank of every mode (DEP, DWDP, reference) batches its own queue with this scheduler, so the
modes see identical batches for identical arrivals; only the engine's timing differs. It is part of the core
(no engine import) because the planner rebuilds a bench run's batches with it (perf/bench_work.py); the engine's
worker serves its queue with it, and engine/records.py re-exports Request and Segment.

Policy (what a context server such as TensorRT-LLM's does with chunked prefill enabled):
- requests are served first come, first served (arrival_s, then request_id);
- an iteration takes eligible requests (arrival_s <= now_s) in order and packs their remaining
  tokens until the budget of max_num_tokens is used up; the request that does not fit is cut at
  the budget (a chunk, Segment.is_last False) and stays at the head of the queue, so the next
  iteration continues it first;
- a request's first token is produced by the iteration holding its last chunk (is_last True).

Optional policy (`chunked=False`, `max_batch`): a context server WITHOUT chunked prefill (TensorRT-LLM's default
`enable_chunked_prefill: false`, what upstream's examples/dwdp/reproduce.py @ 1f939488 `build_worker_config` deploys
with `max_batch_size` ctx_max_bs): an iteration takes whole requests in FCFS order while the next one fits the
token budget and fewer than `max_batch` are taken; the first request that does not fit waits for the next
iteration (it is never cut), as TensorRT-LLM's cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp
@ b8b7b782 `MicroBatchScheduler::operator()` does in its "skip chunking" branch (`break` when
batchNumTokens + reqNumTokens exceeds the budget; `break` once maxBatchSizeRuntime requests are scheduled). A
request longer than the whole budget is refused (ValueError): it could never be scheduled. `max_batch` (requests
per iteration; None: no limit) applies with chunking too (the same loop counts chunked requests).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Segment:
    """A chunk of one request processed in one iteration: tokens [start, start + length) of request_id."""

    request_id: int
    start: int
    length: int
    is_last: bool  # the request's final chunk: its first token is produced by this iteration


@dataclass
class Request:
    """One context request in a rank's queue."""

    request_id: int
    rank: int
    isl: int
    arrival_s: float  # seconds after the run's start


#: the context batching `dwdp size` prices without --no-chunked-prefill / --ctx-max-batch: (chunked prefill, the
#: request cap per rank per iteration, 0: none). `dwdp gen-config` run alone writes TensorRT-LLM's default and the
#: recipe's instead (whole prompts, max_batch_size 4: integration/gen_config.py); `dwdp size --out` passes gen-config
#: what it priced. Each command prints which it assumed with `describe_context_batching`.
SIZE_CONTEXT_BATCHING = (True, 0)


def describe_context_batching(chunked: bool, max_batch: int) -> str:
    """A context server's batching in words (one fact: `dwdp size` prints what it priced, `dwdp gen-config` what it
    wrote): chunked prefill up to max_num_tokens or whole prompts, and the request cap per rank per iteration
    (`max_batch` 0: none)."""
    how = "chunked prefill up to max_num_tokens" if chunked else "whole prompts (no chunked prefill)"
    cap = f"at most {max_batch} request{'s' * (max_batch != 1)}" if max_batch else "no request limit"
    return f"{how}, {cap} per rank per iteration"


def max_requests_per_iteration(max_num_tokens: int, min_isl: int, chunked: bool = True) -> int:
    """The most requests one iteration of RankScheduler can hold when no prompt is shorter than `min_isl` and no
    max_batch caps it: with chunking, the tail of a request the last iteration cut (1 token at least), whole
    requests, and the first chunk of the next, 1 + ceil((max_num_tokens - 1) / min_isl); whole prompts only,
    floor(max_num_tokens / min_isl). What a context server's max_batch_size must allow for its iterations to be
    the ones `dwdp size` priced without --ctx-max-batch."""
    if max_num_tokens < 1 or min_isl < 1:
        raise ValueError(f"max_num_tokens ({max_num_tokens}) and min_isl ({min_isl}) must be >= 1")
    if not chunked:
        return max(1, max_num_tokens // min_isl)
    return 1 + -(-(max_num_tokens - 1) // min_isl)


class RankScheduler:
    """FCFS chunked-prefill batching of one rank's queue.

    `next_batch(now_s)` commits the batch it returns (the caller must run it):
    a non-empty list of Segments (total length <= max_num_tokens), [] when requests remain but none
    has arrived by now_s (sleep until `next_arrival_s()`), or None when every request is scheduled.
    """

    def __init__(self, requests: list[Request], max_num_tokens: int, max_batch: int | None = None,
                 chunked: bool = True):
        if max_num_tokens < 1:
            raise ValueError(f"max_num_tokens must be >= 1, got {max_num_tokens}")
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 or None, got {max_batch}")
        self.max_num_tokens = max_num_tokens
        self.max_batch = max_batch
        self.chunked = chunked
        ids = [r.request_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate request_id in the queue: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
        for r in requests:
            if r.isl < 1:
                raise ValueError(f"request {r.request_id}: isl must be >= 1, got {r.isl}")
            if r.arrival_s < 0:
                raise ValueError(f"request {r.request_id}: arrival_s must be >= 0, got {r.arrival_s}")
            self._check_fits(r)
        self._queue = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        self._head = 0  # index of the first request not fully scheduled
        self._offset = 0  # tokens of the head request already scheduled

    def append(self, req: Request) -> None:
        """Queue a request that arrives after every queued one (a simulator feeding arrivals as they happen:
        sizing/simulator.py); the FCFS order of the class doc is kept."""
        if req.isl < 1:
            raise ValueError(f"request {req.request_id}: isl must be >= 1, got {req.isl}")
        self._check_fits(req)
        if self._queue and (req.arrival_s, req.request_id) < (self._queue[-1].arrival_s, self._queue[-1].request_id):
            raise ValueError(f"request {req.request_id} arrives at {req.arrival_s} s, before the last queued one")
        self._queue.append(req)

    def _check_fits(self, r: Request) -> None:
        if not self.chunked and r.isl > self.max_num_tokens:
            raise ValueError(f"request {r.request_id}: isl {r.isl} exceeds max_num_tokens {self.max_num_tokens} "
                             f"without chunked prefill")

    def done(self) -> bool:
        """True when every token of every request has been handed out."""
        return self._head >= len(self._queue)

    def next_arrival_s(self) -> float | None:
        """Arrival time of the first request not fully scheduled (None when done)."""
        return None if self.done() else self._queue[self._head].arrival_s

    def remaining_tokens(self) -> int:
        """Tokens not yet handed out."""
        return sum(r.isl for r in self._queue[self._head:]) - self._offset

    def next_batch(self, now_s: float) -> list[Segment] | None:
        """The next iteration's segments at time now_s (seconds after the run's start); see the class doc."""
        if self.done():
            return None
        budget = self.max_num_tokens
        batch: list[Segment] = []
        while budget > 0 and not self.done():
            req = self._queue[self._head]
            if req.arrival_s > now_s or (self.max_batch is not None and len(batch) >= self.max_batch):
                break
            if not self.chunked and req.isl > budget:  # whole prompts only: it waits for the next iteration
                break
            take = min(req.isl - self._offset, budget)
            is_last = self._offset + take == req.isl
            batch.append(Segment(request_id=req.request_id, start=self._offset, length=take, is_last=is_last))
            budget -= take
            if is_last:
                self._head += 1
                self._offset = 0
            else:
                self._offset += take
        return batch
