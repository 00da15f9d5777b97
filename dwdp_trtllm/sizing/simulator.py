"""A discrete-event simulation of one disaggregated deployment (pure, deterministic: no clock, no randomness).

Requests arrive (traffic.Arrivals; a closed loop issues a user's next request when its previous one finished) and
go to the context server with the fewest outstanding tokens (ties: the lowest index), or with `Deployment.ctx_router`
"round_robin" to each context server in turn (TensorRT-LLM's disaggregated server without a router configured:
tensorrt_llm/serve/router.py @ 00895e31 `create_router`, RoundRobinRouter); inside a DEP server, to its
attention-DP rank with the fewest. A context server runs iterations back to back while it has work: every rank
packs its queue FCFS with chunked prefill up to max_num_tokens (batching.RankScheduler, the engine's own
scheduler; or, with `Deployment.chunked` False, whole prompts only, and at most `ctx_max_batch` requests per
iteration when set); `ctx_time` prices the iteration (context_cost.ContextCost: the planner). DWDP servers are one rank
each and free-run; a DEP server's ranks start and end every iteration together (lock-step with the slowest). The
iteration holding a request's last chunk produces its first token (TTFT), as a disaggregated TensorRT-LLM context
server does; the KV cache then moves to the generation server with the fewest requests (`kv_time(isl)`), where
the request joins the continuous batch at the next step boundary (up to attention groups x batch requests; later
ones wait). Each step every active request gains one token; `step_time(tp, batch per attention group, mean KV
length)` prices it
(decode_cost.DecodeCost). Steps are advanced in runs between events (a finish or an admission), each run priced at
its mid KV length; an arrival during a run ends it at the step then running.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..spec.batching import RankScheduler, Request
from .context_cost import Segments
from .traffic import Arrivals


@dataclass(frozen=True)
class Deployment:
    """One disaggregated deployment: context servers (DWDP ranks of groups of ctx_group, or DEP servers of
    ctx_group GPUs) and generation servers of gen_tp GPUs, gen_batch requests per attention group: attention DP + EP
    by default (a group is one rank), attention TP over gen_attn_tp GPUs (1 or gen_tp: one group of gen_tp GPUs),
    experts MoE TP gen_moe_tp x EP gen_tp / gen_moe_tp."""

    mode: str  # dwdp | dep | tp
    ctx_group: int
    ctx_servers: int  # DWDP: ranks (a multiple of ctx_group); DEP, TP: servers of ctx_group GPUs
    mnt: int
    gen_tp: int
    gen_servers: int
    gen_batch: int
    redundant: int = 0
    ctx_max_batch: int = 0  # requests per context iteration per rank (0: no limit; TensorRT-LLM's max_batch_size)
    chunked: bool = True  # chunked prefill on the context servers (False: whole prompts, spec/batching.py)
    gen_attn_tp: int = 1  # attention TP of a generation server (1: attention DP over its GPUs)
    gen_moe_tp: int = 1  # MoE tensor parallelism of a generation server's experts (EP: gen_tp / gen_moe_tp)
    ctx_router: str = "least_tokens"  # how requests pick a context server: least_tokens | round_robin (module doc)

    @property
    def gen_groups(self) -> int:
        """Attention groups per generation server (attention-DP ranks), each holding up to gen_batch requests."""
        return self.gen_tp // self.gen_attn_tp

    def gen_shape(self) -> str:
        """The generation server's parallelism beyond attention DP + EP: '' (DEP), 'etp2ep4', 'tp8 etp2ep4'."""
        if self.gen_attn_tp == 1 and self.gen_moe_tp == 1:
            return ""
        moe = f"etp{self.gen_moe_tp}ep{self.gen_tp // self.gen_moe_tp}"
        return moe if self.gen_attn_tp == 1 else f"tp{self.gen_attn_tp} {moe}"

    @property
    def ctx_gpus(self) -> int:
        return self.ctx_servers * (1 if self.mode == "dwdp" else self.ctx_group)

    @property
    def gen_gpus(self) -> int:
        return self.gen_servers * self.gen_tp

    @property
    def gpus(self) -> int:
        return self.ctx_gpus + self.gen_gpus

    def ctx_short(self) -> str:
        """'16 DWDP8 ranks', '2 x DEP8', '3 x TP8'."""
        if self.mode == "dwdp":
            return f"{self.ctx_servers} DWDP{self.ctx_group} ranks"
        return f"{self.ctx_servers} x {self.mode.upper()}{self.ctx_group}"

    def ctx_label(self) -> str:
        return f"{self.ctx_short()}, MNT {self.mnt}"


@dataclass
class SimResult:
    """Per request (arrival order of issue): arrival, first token, finish (s), ISL, OSL; and run totals."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    done_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    window_s: float  # the offered traffic's span: throughput is counted inside it
    ctx_busy_s: float  # summed busy time of the context servers
    gen_steps: int
    kv_s: float  # summed KV-transfer time
    steady_end_s: float = math.nan  # where the offered load stops being steady (nan: window_s): a closed loop's last send


class _Ctx:
    def __init__(self, ranks: int, mnt: int, max_batch: int = 0, chunked: bool = True):
        self.ranks = [RankScheduler([], mnt, max_batch or None, chunked) for _ in range(ranks)]
        self.outstanding = [0] * ranks
        self.busy = False


@dataclass
class _Gen:
    """A generation server's continuous batch. Its active requests are kept relative to `clock` (the steps it has
    run): a request admitted at clock c with r tokens to go and KV length k finishes at clock c + r and has KV
    length k + (clock - c) meanwhile, so a run of steps advances one counter instead of every request (the
    simulator prices hundreds of thousands of runs per search)."""

    cap: int
    #: (finish clock, admission order, request index, KV length - admission clock), a heap: the next to finish first
    active: list = field(default_factory=list)
    waiting: deque = field(default_factory=deque)
    run: tuple | None = None  # (start_s, step_s, steps, version)
    version: int = 0
    clock: int = 0
    admitted: int = 0
    kv_base: int = 0  # sum over active requests of (KV length - admission clock): their KV lengths sum to
    #                   kv_base + len(active) * clock (integers: the mean is exact)


def simulate(arrivals: Arrivals, dep: Deployment, ctx_time: Callable[[int, list[Segments]], float],
             step_time: Callable[[int, float, float], float], kv_time: Callable[[int], float],
             duration_s: float | None = None) -> SimResult:
    """Run `arrivals` through `dep` (module docstring). ctx_time(server, per-rank segments) -> s;
    step_time(tp, requests per attention group, mean KV length) -> s; kv_time(isl) -> s. duration_s: a closed loop issues
    no request after it (default: the arrivals' own span)."""
    n_req = len(arrivals)
    closed = arrivals.closed_users
    ctx_ranks = dep.ctx_group if dep.mode == "dep" else 1  # a TP server is one scheduler over its GPUs
    ctxs = [_Ctx(ctx_ranks, dep.mnt, dep.ctx_max_batch, dep.chunked) for _ in range(dep.ctx_servers)]
    gens = [_Gen(dep.gen_groups * dep.gen_batch) for _ in range(dep.gen_servers)]
    t_arr = np.full(n_req, np.nan)
    t_first = np.full(n_req, np.nan)
    t_done = np.full(n_req, np.nan)
    isl, osl = arrivals.isl, arrivals.osl
    ev: list = []  # (time, order, kind, payload)
    order = 0

    def push(t, kind, payload):
        nonlocal order
        heapq.heappush(ev, (t, order, kind, payload))
        order += 1

    if dep.ctx_router not in ("least_tokens", "round_robin"):
        raise ValueError(f"ctx_router: least_tokens or round_robin, got {dep.ctx_router!r}")
    turn = 0  # round robin: the next context server
    issued = 0
    horizon = duration_s if duration_s is not None else arrivals.duration_s
    if closed:
        for _ in range(min(closed, n_req)):
            push(0.0, "arrive", issued)
            issued += 1
    else:
        for i in range(n_req):
            push(float(arrivals.t_s[i]), "arrive", i)
        issued = n_req
    stats = {"ctx_busy": 0.0, "steps": 0, "kv": 0.0}

    def start_ctx(s: int, t: float):
        c = ctxs[s]
        batches = [r.next_batch(t) or [] for r in c.ranks]
        if not any(batches):
            c.busy = False
            return
        segs = [Segments(tuple((g.start, g.length, int(isl[g.request_id])) for g in b)) for b in batches]
        dt = ctx_time(s, segs)
        c.busy = True
        stats["ctx_busy"] += dt
        push(t + dt, "ctx_end", (s, batches))

    def start_run(k: int, t: float):
        g = gens[k]
        while g.waiting and len(g.active) < g.cap:
            i = g.waiting.popleft()
            kv_rel = int(isl[i]) + 1 - g.clock
            heapq.heappush(g.active, (g.clock + int(osl[i]) - 1, g.admitted, i, kv_rel))
            g.admitted += 1
            g.kv_base += kv_rel
        if not g.active:
            g.run = None
            return
        steps = g.active[0][0] - g.clock  # the fewest tokens any active request has to go
        kv0 = (g.kv_base + len(g.active) * g.clock) / len(g.active)  # mean KV length (integers: exact)
        step = step_time(dep.gen_tp, len(g.active) / dep.gen_groups, kv0 + steps / 2)
        g.version += 1
        g.run = (t, step, steps, g.version)
        push(t + steps * step, "gen_end", (k, g.version))

    def advance(k: int, steps: int, t: float):
        g = gens[k]
        stats["steps"] += steps
        g.clock += steps
        done = []
        while g.active and g.active[0][0] <= g.clock:
            done.append(heapq.heappop(g.active))
        for _, _, i, kv_rel in sorted(done, key=lambda a: a[1]):  # in admission order
            g.kv_base -= kv_rel
            _finish(i, t)
        g.run = None

    def _finish(i: int, t: float) -> None:
        nonlocal issued
        t_done[i] = t
        if closed and issued < n_req and t <= horizon:
            push(t, "arrive", issued)
            issued += 1

    while ev:
        t, _, kind, p = heapq.heappop(ev)
        if kind == "arrive":
            i = p
            t_arr[i] = t
            if dep.ctx_router == "round_robin":
                s, turn = turn % len(ctxs), turn + 1
            else:
                s = min(range(len(ctxs)), key=lambda j: (sum(ctxs[j].outstanding), j))
            c = ctxs[s]
            r = min(range(ctx_ranks), key=lambda j: (c.outstanding[j], j))
            c.outstanding[r] += int(isl[i])
            c.ranks[r].append(Request(request_id=i, rank=r, isl=int(isl[i]), arrival_s=t))
            if not c.busy:  # start after every other arrival of this instant (they join the same iteration)
                c.busy = True
                push(t, "ctx_start", s)
        elif kind == "ctx_start":
            start_ctx(p, t)
        elif kind == "ctx_end":
            s, batches = p
            for r, b in enumerate(batches):
                for g in b:
                    if g.is_last:
                        i = g.request_id
                        t_first[i] = t
                        ctxs[s].outstanding[r] -= int(isl[i])
                        kv = kv_time(int(isl[i]))
                        stats["kv"] += kv
                        push(t + kv, "kv_ready", i)
            start_ctx(s, t)
        elif kind == "kv_ready":
            i = p
            if osl[i] <= 1:
                _finish(i, t)
                continue
            k = min(range(len(gens)), key=lambda j: (len(gens[j].active) + len(gens[j].waiting), j))
            g = gens[k]
            g.waiting.append(i)
            if g.run is None:
                start_run(k, t)
            elif len(g.active) < g.cap:  # join at the end of the step now running
                t0, step, steps, _ = g.run
                done = min(steps, int(math.floor((t - t0) / step)) + 1)
                advance(k, done, t0 + done * step)
                start_run(k, t0 + done * step)
        elif kind == "gen_end":
            k, version = p
            g = gens[k]
            if g.run is None or g.run[3] != version:
                continue  # superseded by an admission
            advance(k, g.run[2], t)
            start_run(k, t)
    last = np.nanmax(t_arr) if issued else 0.0
    window = float(last if not closed else min(horizon, np.nanmax(t_done)))
    # a closed loop holds its `closed` users in flight until its last send (the prompt cap or the duration); after
    # it the users drain one by one and the rate falls: the steady load ends there (all sent at once: no steady part)
    steady = float(last) if closed and last > 0 else math.nan
    m = ~np.isnan(t_arr)
    return SimResult(t_arr[m], t_first[m], t_done[m], isl[m], osl[m], max(window, 1e-9), stats["ctx_busy"],
                     stats["steps"], stats["kv"], steady)
