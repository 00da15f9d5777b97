"""The floor of the engine's work: what its kernels take for the same per-layer work, each timed alone, on this
machine. Stock kernels (torch's GEMMs, cuDNN / flash attention) where one does the work, called as the engine calls
them; the engine's own one-pass kernels for the attention passes no stock kernel takes over (below). Historically
called the "stock-kernel floor" (`dwdp bench --floor`'s messages, docs/BENCHMARKS.md section 7).

`dwdp bench --floor` times it for the measured iterations of every rank and mode and reports the engine's
efficiency (floor / measured) per phase beside the table (docs/BENCHMARKS.md, "Engine vs floor").

What one iteration's floor counts (its batch: the segments it ran, with their cached prefixes, and the
routing it produced per MoE layer), each timed alone with CUDA events (median of `reps` after warm-up):
- attention, per layer: every projection GEMM at the model dtype (MLA: q_a, q_b, kv_a, kv_b over prefix +
  chunk keys, o; GQA: q, k, v, o), or, when the run's linear layers are FP8 (model.fp8_linear), the same GEMMs in
  the same FP8 block-scale recipe the engine runs (torch._scaled_mm, 1x128 activation / 128x128 weight scales,
  outer-dim-major; rows padded to 16 and out-features to 128 as engine/fp8_linear.py pads them) and the attention core over the actual sequence mix with the fastest stock
  kernel of this torch, through the engine's calls (cuDNN SDPA per segment via engine/attention_cuda.py, v at its
  own head dim; the chunks with a cached prefix all one way, either all as the causal chunk + flash over the
  prefix + merge or all as one causal call over prefix + chunk, whichever is faster for the whole batch: the engine
  chooses per chunk (prefix_as_causal), so on a batch whose chunks favour different ways the engine can beat
  this part of the floor; flash varlen with v padded to the qk head dim where it is faster or cuDNN is not usable;
  SDPA per segment on the CPU);
- routed experts, per MoE layer: the grouped GEMMs of that layer's routing (gate|up, then down) on one
  [E, N, K] buffer: torch._grouped_mm for BF16, torch._scaled_grouped_mm (rowwise scales) for FP8; the rows
  are those the rank's expert phase computes (DEP: the pairs its experts received from every rank);
- other: the dense MLP GEMMs of the first_k_dense layers, and per MoE layer the router GEMM and the shared
  experts' GEMMs (dense MLP and shared experts FP8 with FP8 linears, gate|up as one GEMM as the engine runs it;
  the router stays at the model dtype).
- attention passes, per layer: the memory passes between the attention's stock kernels that none of them takes
  over (attention_passes_ms): RoPE of q's rope part and of the rope key (GQA: of q and k), in place; MLA's key
  [S, N, Dn + R] assembled from kv_b's nope part and the rope key broadcast over heads (cuDNN's SDPA reads one K
  tensor); with FP8 linears the 1x128 quantisation of the attention output for o_proj (no stock attention kernel
  writes block-scaled FP8). No stock kernel does any of these in one pass: they run the engine's one-pass kernels
  (rope_cuda, mla_cuda, quant_cuda; about DRAM bandwidth). floor_report's attention_proj is the attention floor
  less its core (projections + passes); attention_passes gives the passes apart.
Not counted (taken as free, i.e. fusable into a neighbour by a production stack): norms and the quantisation of a
normed input (fused into the norm), SwiGLU, top-k, the sort / gather / combine of routed rows, the other activation
quantisations, embedding. The floor is therefore what these kernels take alone for the counted work: a reference,
not a strict lower bound. The engine can come in under it where it runs other kernels (FP8 routed experts: its
CUTLASS blockwise op, not torch._scaled_grouped_mm), where kernels timed alone on random data run slower than inside
the engine (docs/BENCHMARKS.md section 7: routed experts at 0.85-0.95 of the floor), and in the attention core of a
batch whose prefixed chunks favour different ways (above); nor does it bound other implementations (other kernels,
fused passes).

Clock: kernels timed alone run at the card's boost clock, the engine's back-to-back forwards at what its power limit
allows (docs/BENCHMARKS.md section 12). floor_report samples the SM clock and power while the floor is timed
(bench/gpu_clocks.py; the burst floor's cut to its timed calls, FloorTimer.windows; the engine's during its measured
iterations, by the caller), and with `--floor-sustained`
also times the floor under sustained load: these same kernels (every `*_ms` here times a `*_fn` closure) replayed
back to back (bench/floor_sustained.py). over_floor is every engine / floor ratio, burst or sustained.

Shape legend: T tokens of the iteration, H hidden, E experts, I intermediate, A routed rows.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..models import ModelSpec
from ..perf.flops import attention_proj_flops, core_flops, dense_mlp_flops, expert_rows_flops, shared_and_router_flops
from .metrics import phase_ms


@dataclass(frozen=True)
class Batch:
    """One iteration's work as the floor sees it: (prefix, length) per segment and the expert rows per MoE layer."""

    segments: tuple[tuple[int, int], ...]
    rows_per_expert: tuple[tuple[int, ...], ...]  # [MoE layer][expert]

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.segments)


class FloorTimer:
    """Times the floor's kernels (module docstring: stock ones and the engine's one-pass passes) alone on one device;
    buffers are allocated once per shape and reused."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, weight_dtype: str, device: torch.device, *,
                 warmup: int = 2, reps: int = 5, fp8_linear: bool = False):
        self.spec, self.dtype, self.weight_dtype, self.device = spec, dtype, weight_dtype, device
        #: the linear layers an FP8 checkpoint quantises run as FP8 block-scale GEMMs (CUDA; elsewhere model dtype)
        self.fp8_linear = fp8_linear and device.type == "cuda" and hasattr(torch, "_scaled_mm")
        self.warmup, self.reps = warmup, reps
        self._bufs: dict[tuple, torch.Tensor] = {}
        self._core_pick: dict[tuple, int] = {}  # segments -> index of attention_core_fns found fastest
        self._gen = torch.Generator(device=device).manual_seed(0)
        #: (start, end) on perf_counter of every timed call group of time_ms (its warm-up excluded): the clock
        #: samples of the burst floor are cut to these (gpu_clocks.clock_stats windows)
        self.windows: list[tuple[float, float]] = []

    # ---- buffers and timing -------------------------------------------------------------------------
    def _buf(self, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
        """A random [shape] tensor: one buffer per (trailing dims, dtype), grown to the most rows asked and
        sliced, so batches of many sizes share it (an [A, H] activation is GBs at DeepSeek width)."""
        dtype = dtype or self.dtype
        rows, trailing = shape[0], tuple(shape[1:])
        key = (trailing, dtype)
        have = self._bufs.get(key)
        if have is None or have.shape[0] < rows:
            self._bufs.pop(key, None)
            # random data, never zeros (zeros run faster than real data); drawn in chunks to bound the fp32 temporary
            t = torch.empty((max(rows, 1), *trailing), device=self.device, dtype=dtype)
            step = max(1, (256 << 20) // (4 * max(1, t[0].numel())))
            for i in range(0, t.shape[0], step):
                part = t[i:i + step]
                part.copy_(torch.randn(part.shape, generator=self._gen, device=self.device) * 0.05)
            self._bufs[key] = have = t
        return have[:rows]

    def time_ms(self, fn) -> float:
        """Median milliseconds of fn() (CUDA events on GPU, perf_counter on CPU); the timed calls' host span is
        appended to `windows`."""
        cuda = self.device.type == "cuda"
        for _ in range(self.warmup):
            fn()
        if cuda:  # the warm-up done: the window holds the timed calls only (events time them as before)
            torch.cuda.synchronize(self.device)
        samples = []
        t_start = time.perf_counter()
        for _ in range(self.reps):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                samples.append(a.elapsed_time(b))
            else:
                t = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t) * 1e3)
        self.windows.append((t_start, time.perf_counter()))  # on CUDA each rep ends synchronised: its kernels ran inside
        return statistics.median(samples)

    def _timed(self, fn) -> float:
        """time_ms of a kernel closure; 0 for no work (None)."""
        return 0.0 if fn is None else self.time_ms(fn)

    # Every timed piece is a closure (`*_fn`, None for no work) that `*_ms` times alone (the burst floor) and
    # bench/floor_sustained.py replays back to back (the floor under sustained load): the same kernels in both.
    def gemm_fn(self, m: int, n: int, k: int):
        """[m, k] @ [k, n] at the model dtype (nn.Linear layout: weight [n, k])."""
        if m == 0:
            return None
        x, w = self._buf((m, k)), self._buf((n, k))
        return lambda: F.linear(x, w)

    def gemm_ms(self, m: int, n: int, k: int) -> float:
        return self._timed(self.gemm_fn(m, n, k))

    def linear_fn(self, m: int, n: int, k: int):
        """One linear layer an FP8 checkpoint quantises: gemm_fn, or with fp8_linear the block-scale recipe
        (activation quantisation counted free, like every quantisation here)."""
        from ..engine.fp8_linear import ROWS_TO, kernel_takes_k
        if not self.fp8_linear or not kernel_takes_k(k):
            return self.gemm_fn(m, n, k)
        if m == 0:
            return None
        f8 = torch.float8_e4m3fn
        mp, np_, kb = -(-m // ROWS_TO) * ROWS_TO, -(-n // 128) * 128, k // 128
        a, w = self._buf((mp, k), f8), self._buf((np_, k), f8)
        s_a = self._buf((kb, mp), torch.float32).abs().add_(1e-3).t()  # [mp, kb] outer-dim-major
        s_w = self._buf((np_ // 128, kb), torch.float32).abs().add_(1e-3).t()  # [kb, nb] outer-dim-major
        return lambda: torch._scaled_mm(a, w.t(), s_a, s_w, out_dtype=self.dtype)

    def linear_ms(self, m: int, n: int, k: int) -> float:
        if not self.fp8_linear:
            return self.gemm_ms(m, n, k)  # through the (memoised) gemm_ms, as before the closures
        return self._timed(self.linear_fn(m, n, k))

    def op_fn(self, op: str, m: int, n: int, k: int):
        """The closure of one GEMM of a *_gemms list: op "gemm" (model dtype) or "linear" (FP8 with fp8_linear)."""
        return (self.gemm_fn if op == "gemm" else self.linear_fn)(m, n, k)

    def op_ms(self, op: str, m: int, n: int, k: int) -> float:
        return (self.gemm_ms if op == "gemm" else self.linear_ms)(m, n, k)

    # ---- attention ----------------------------------------------------------------------------------
    def attention_core_ms(self, segments: tuple[tuple[int, int], ...]) -> float:
        """The fastest of attention_core_fns timed alone; which one is kept for attention_core_fn."""
        fns = self.attention_core_fns(segments)
        times = [self.time_ms(fn) for fn in fns]
        best = min(range(len(fns)), key=times.__getitem__)
        self._core_pick[segments] = best
        return times[best]

    def attention_core_fn(self, segments: tuple[tuple[int, int], ...]):
        """The closure attention_core_ms found fastest for these segments (timed first if it was not)."""
        if segments not in self._core_pick:
            self.attention_core_ms(segments)
        return self.attention_core_fns(segments)[self._core_pick[segments]]

    def attention_core_fns(self, segments: tuple[tuple[int, int], ...]) -> list:
        """The ways this torch can run the attention core over `segments` (module docstring), in a fixed order:
        per segment (cuDNN: prefixed chunks split), prefixed chunks as one causal call (cuDNN, with a prefix),
        flash varlen (v padded; CUDA, bf16/fp16)."""
        sp = self.spec
        if sp.attention == "mla":
            N, d, e = sp.num_heads, sp.qk_nope_head_dim + sp.qk_rope_head_dim, sp.v_head_dim
        else:
            N, d, e = sp.num_heads, sp.head_dim, sp.head_dim
        scale = d ** -0.5
        from ..engine.attention_cuda import BUCKET, attend_bucketed, causal_over_prefix, cudnn_attention_usable
        use_cudnn = self.device.type == "cuda" and cudnn_attention_usable(self.device.index or 0)
        T, S = sum(n for _, n in segments), sum(p + n for p, n in segments)
        P = max(p for p, _ in segments)
        # q rows: P rows before the chunks (the dummy queries of the causal-over-prefix way), spare rows after
        q_all, k, v = self._buf((P + T + BUCKET, N, d)), self._buf((S + BUCKET, N, d)), self._buf((S + BUCKET, N, e))
        q = q_all[P:]

        def per_segment(front: bool):
            """The engine's calls on views of buffers with spare rows (no padding copies): front: a chunk with a prefix
            as one causal call over prefix + chunk (attention_cuda.causal_over_prefix), else as the causal chunk +
            flash over the prefix + merge (attend_bucketed)"""
            qo = ko = 0
            for p, n in segments:
                qs, ks, vs = q[qo:qo + n], k[ko:ko + p + n], v[ko:ko + p + n]
                if use_cudnn and front and p:
                    causal_over_prefix(q_all[P + qo - p:], k[ko:], v[ko:], n, p, scale)
                elif use_cudnn:
                    attend_bucketed(q[qo:], k[ko:], v[ko:], n, p, scale)
                else:
                    from ..engine.layers import attend
                    attend(qs, ks, vs if e == d or self.device.type != "cuda" else F.pad(vs, (0, d - e)), p, scale)
                qo, ko = qo + n, ko + p + n
        fns = [lambda: per_segment(False)]
        if use_cudnn and P:  # every prefixed chunk the other way: the floor keeps the faster way for the whole batch
            # (the engine chooses per chunk: module docstring)
            fns.append(lambda: per_segment(True))
        if self.device.type == "cuda" and e <= d:
            from ..engine.layers import _torch_varlen
            varlen = _torch_varlen()
            if varlen is not None and self.dtype in (torch.bfloat16, torch.float16):
                vp = F.pad(v, (0, d - e)) if e < d else v
                cu_q = torch.tensor([0] + [sum(n for _, n in segments[:i + 1]) for i in range(len(segments))],
                                    dtype=torch.int32, device=self.device)
                cu_k = torch.tensor([0] + [sum(p + n for p, n in segments[:i + 1]) for i in range(len(segments))],
                                    dtype=torch.int32, device=self.device)
                mq, mk = max(n for _, n in segments), max(p + n for p, n in segments)
                fns.append(lambda: varlen(q[:T], k[:S], vp[:S], cu_q, cu_k, mq, mk, scale=scale, window_size=(-1, 0)))
        return fns

    def attention_passes_ms(self, T: int, S: int) -> float:
        return self._timed(self.attention_passes_fn(T, S))

    def attention_passes_fn(self, T: int, S: int):
        """One layer's attention passes (module docstring) for T queries over S keys (cached prefixes included):
        RoPE in place, MLA's key assembly, and with FP8 linears the quantisation of o_proj's input. On CUDA the
        engine's one-pass kernels, elsewhere their eager references (functional only)."""
        if T == 0:
            return None
        sp = self.spec
        from ..engine.fp8_linear import ROWS_TO, kernel_takes_k
        from ..engine.fused import fused_enabled
        from ..engine.layers import apply_rope_
        cuda = self.device.type == "cuda" and fused_enabled()
        mla = sp.attention == "mla"
        N = sp.num_heads
        if mla:
            Dn, R, e = sp.qk_nope_head_dim, sp.qk_rope_head_dim, sp.v_head_dim
            d = Dn + R
        else:
            R = d = e = sp.head_dim
        # cos 1, sin 0: the rotation keeps the data as it is over the repetitions (the passes' cost does not
        # depend on the values)
        cos_TF = torch.ones(T, R // 2, device=self.device)
        sin_TF = torch.zeros(T, R // 2, device=self.device)
        q = self._buf((T, N, d))
        k_rope = self._buf((T, 1, R)) if mla else self._buf((T, sp.num_kv_heads, d))
        o_quant = self.fp8_linear and kernel_takes_k(N * e)
        o = self._buf((T, N * e)) if o_quant else None
        if mla:
            k, k_nope, kr = self._buf((S, N, d)), self._buf((S, N, Dn)), self._buf((S, R))
            from ..engine import mla_cuda
            key_kernel = cuda and mla_cuda.usable(Dn, R)

        def run():
            apply_rope_(q[..., d - R:], cos_TF, sin_TF, interleaved=mla and sp.rope_interleave)
            apply_rope_(k_rope, cos_TF, sin_TF, interleaved=mla and sp.rope_interleave)
            if mla:
                if key_kernel:
                    mla_cuda.mla_key_(k, k_nope, kr)
                else:
                    torch.cat([k_nope, kr[:, None, :].expand(S, N, R)], dim=-1, out=k)
            if o is not None:
                from ..engine.quant_cuda import quant_1x128
                quant_1x128(o, rows_to=ROWS_TO, scale_col_major=True)
        return run

    def attention_proj_gemms(self, T: int, S: int) -> list[tuple[str, int, int, int]]:
        """(op, m, n, k) of one attention layer's projection GEMMs for T queries over S keys (op_fn / op_ms)."""
        sp = self.spec
        H, N = sp.hidden_size, sp.num_heads
        if sp.attention == "mla":
            qd = N * (sp.qk_nope_head_dim + sp.qk_rope_head_dim)
            out = ([("linear", T, sp.q_lora_rank, H), ("linear", T, qd, sp.q_lora_rank)] if sp.q_lora_rank
                   else [("linear", T, qd, H)])
            return out + [("linear", T, sp.kv_lora_rank + sp.qk_rope_head_dim, H),
                          ("linear", S, N * (sp.qk_nope_head_dim + sp.v_head_dim), sp.kv_lora_rank),
                          ("linear", T, H, N * sp.v_head_dim)]
        G, d = sp.num_kv_heads, sp.head_dim
        return [("linear", T, N * d, H), ("linear", T, G * d, H), ("linear", T, G * d, H), ("linear", T, H, N * d)]

    def attention_layer_ms(self, segments: tuple[tuple[int, int], ...]) -> dict[str, float]:
        T, S = sum(n for _, n in segments), sum(p + n for p, n in segments)
        proj = sum(self.op_ms(*g) for g in self.attention_proj_gemms(T, S))
        return {"projections": proj, "core": self.attention_core_ms(segments), "passes": self.attention_passes_ms(T, S)}

    # ---- experts ------------------------------------------------------------------------------------
    def grouped_ms(self, rows_per_expert: tuple[int, ...]) -> float:
        return self._timed(self.grouped_fn(rows_per_expert))

    def grouped_fn(self, rows_per_expert: tuple[int, ...]):
        """gate|up then down grouped GEMMs of one MoE layer with these rows per expert."""
        sp = self.spec
        A = sum(rows_per_expert)
        if A == 0:
            return None
        E, H, I = len(rows_per_expert), sp.hidden_size, sp.moe_intermediate
        offs = torch.tensor(rows_per_expert, device=self.device).cumsum(0).to(torch.int32)
        fp8 = self.weight_dtype == "fp8" and self.device.type == "cuda" and hasattr(torch, "_scaled_grouped_mm")
        if fp8:
            f8 = torch.float8_e4m3fn
            a1, a2 = self._buf((A, H), f8), self._buf((A, I), f8)
            w13, w2 = self._buf((E, 2 * I, H), f8), self._buf((E, H, I), f8)
            s_a1, s_a2 = self._buf((A,), torch.float32).abs() + 1e-3, self._buf((A,), torch.float32).abs() + 1e-3
            s_w13, s_w2 = self._buf((E, 2 * I), torch.float32).abs() + 1e-3, self._buf((E, H), torch.float32).abs() + 1e-3

            def run():
                torch._scaled_grouped_mm(a1, w13.transpose(1, 2), s_a1, s_w13, offs=offs, out_dtype=torch.bfloat16)
                torch._scaled_grouped_mm(a2, w2.transpose(1, 2), s_a2, s_w2, offs=offs, out_dtype=torch.bfloat16)
            return run
        a1, a2 = self._buf((A, H)), self._buf((A, I))
        w13, w2 = self._buf((E, 2 * I, H)), self._buf((E, H, I))
        if hasattr(torch, "_grouped_mm") and (self.device.type != "cuda" or self.dtype == torch.bfloat16):
            def run():
                torch._grouped_mm(a1, w13.transpose(1, 2), offs=offs)
                torch._grouped_mm(a2, w2.transpose(1, 2), offs=offs)
            try:
                run()  # this torch / device / dtype runs it? (else the loop below)
                return run
            except (RuntimeError, NotImplementedError):
                pass
        ends = offs.tolist()

        def loop():
            b = 0
            for e, end in enumerate(ends):
                if end > b:
                    F.linear(a1[b:end], w13[e])
                    F.linear(a2[b:end], w2[e])
                b = end
        return loop

    def moe_other_gemms(self, T: int) -> list[tuple[str, int, int, int]]:
        """(op, m, n, k) of one MoE layer's router and shared-expert GEMMs."""
        sp = self.spec
        out = [("gemm", T, sp.num_experts, sp.hidden_size)]  # router (never quantised)
        if sp.num_shared_experts:
            Is = sp.moe_intermediate * sp.num_shared_experts
            out += self._gate_up_gemms(T, Is) + [("linear", T, sp.hidden_size, Is)]
        return out

    def moe_other_ms(self, T: int) -> float:
        return sum(self.op_ms(*g) for g in self.moe_other_gemms(T))

    def _gate_up_gemms(self, T: int, inter: int) -> list[tuple[str, int, int, int]]:
        """gate and up of a SwiGLU MLP: two GEMMs at the model dtype, one [2I] FP8 GEMM with FP8 linears (the engine
        runs gate | up as one weight when I is a multiple of 128)."""
        if self.fp8_linear and inter % 128 == 0 and self.spec.hidden_size % 128 == 0:
            return [("linear", T, 2 * inter, self.spec.hidden_size)]
        return [("linear", T, inter, self.spec.hidden_size)] * 2

    def dense_mlp_gemms(self, T: int) -> list[tuple[str, int, int, int]]:
        """(op, m, n, k) of one dense MLP layer's GEMMs."""
        sp = self.spec
        return self._gate_up_gemms(T, sp.dense_intermediate) + [("linear", T, sp.hidden_size, sp.dense_intermediate)]

    def dense_mlp_ms(self, T: int) -> float:
        return sum(self.op_ms(*g) for g in self.dense_mlp_gemms(T))

    # ---- one iteration ------------------------------------------------------------------------------
    def iteration_ms(self, batch: Batch) -> dict[str, float]:
        """{"attention", "expert_gemm", "other", "total"}: floor ms of one iteration (all layers); attention includes
        "attention_core" and "attention_passes", also given apart."""
        sp = self.spec
        T = batch.tokens
        att = self.attention_layer_ms(batch.segments)
        attention = (att["projections"] + att["core"] + att["passes"]) * sp.num_layers
        experts = sum(self.grouped_ms(r) for r in batch.rows_per_expert)
        other = self.dense_mlp_ms(T) * sp.first_k_dense + self.moe_other_ms(T) * sp.num_moe_layers
        return {"attention": attention, "attention_core": att["core"] * sp.num_layers,
                "attention_passes": att["passes"] * sp.num_layers, "expert_gemm": experts,
                "other": other, "total": attention + experts + other}

    def iteration_flops(self, batch: Batch) -> dict[str, float]:
        """FLOPs (2 per MAC) of the floor's phases for one iteration, counted by perf/flops.py (the counts the
        planner prices): attention (projections, MLA's kv_b over prefix + chunk keys, + causal core), expert_gemm
        (the routed rows), other (dense MLP, router, shared)."""
        sp = self.spec
        T, S = batch.tokens, sum(p + n for p, n in batch.segments)
        proj = float(attention_proj_flops(sp, T, S))
        core = sum(float(core_flops(sp, n, p)) for p, n in batch.segments)
        rows = sum(sum(r) for r in batch.rows_per_expert)
        other = float(dense_mlp_flops(sp, T)) * sp.first_k_dense + float(shared_and_router_flops(sp, T)) * sp.num_moe_layers
        return {"attention": (proj + core) * sp.num_layers, "expert_gemm": float(expert_rows_flops(sp, rows)),
                "other": other, "attention_proj": proj * sp.num_layers, "attention_core": core * sp.num_layers}

    def release(self) -> None:
        self._bufs.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


# ---- a bench point's floor ------------------------------------------------------------------------------
def _memo(fn):
    cache: dict = {}

    def wrapped(*args):
        if args not in cache:
            cache[args] = fn(*args)
        return cache[args]
    return wrapped


def rank_batches(by_mode: dict, spec: ModelSpec) -> dict[str, list[tuple[int, object, Batch]]]:
    """{mode: [(rank, IterationRecord, Batch)]} for the measured iterations that processed tokens.

    DEP rank r computes, at iteration i, the pairs every rank routed to its experts (iterations are in lockstep,
    dummy forwards included, so index i is the same layer step on every rank); DWDP and reference ranks compute
    their own pairs over all experts."""
    from ..engine.dep import expert_range

    out: dict[str, list] = {}
    for mode, results in by_mode.items():
        rows = []
        world = len(results)
        for r in results:
            for i, it in enumerate(r.iterations):
                if it.warmup or it.num_tokens == 0 or it.expert_counts is None:
                    continue
                if mode == "dep":
                    lo, hi = expert_range(spec.num_experts, r.rank, world)
                    per_layer = []
                    for m in range(spec.num_moe_layers):
                        tot = [0] * (hi - lo)
                        for peer in results:
                            c = peer.iterations[i].expert_counts if i < len(peer.iterations) else None
                            if c is not None:
                                tot = [a + b for a, b in zip(tot, c[m][lo:hi])]
                        per_layer.append(tuple(tot))
                else:
                    per_layer = [tuple(c) for c in it.expert_counts]
                segs = tuple((s.start, s.length) for s in it.segments)
                rows.append((r.rank, it, Batch(segs, tuple(per_layer))))
        out[mode] = rows
    return out


#: phases measured_ms also carries: the rest of the wall, over the same iterations (perf/floor_points.py reads them)
COMM_PHASES = ("all_to_all", "sync_wait", "prefetch_wait")


def _measured(it) -> dict[str, float]:
    """The engine's ms of one iteration (metrics.phase_ms), the wall as "total"."""
    d = phase_ms(it)
    return {**d, "total": d["wall"]}


#: the phases a floor is given for (ms per iteration), "total" the iteration
FLOOR_KEYS = ("attention", "expert_gemm", "other", "total")


def over_floor(measured: dict, floor: dict, keys=FLOOR_KEYS) -> dict:
    """{phase: measured / floor} (None where the floor is 0): the engine over a floor, burst or sustained; the one
    place this ratio is computed for `dwdp bench --floor` and scripts/profile_engine.py."""
    return {k: (measured[k] / floor[k] if floor.get(k) and k in measured else None) for k in keys}


class _NoSampler:
    """Samples nothing (a CPU floor): stats() is None."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def stats(self, t0=None, t1=None, windows=None) -> None:
        return None


def _sampler(device: torch.device):
    """A GpuSampler of the floor's device (cuda), else _NoSampler."""
    from .gpu_clocks import GpuSampler
    return GpuSampler(device.index or 0) if device.type == "cuda" else _NoSampler()


def floor_report(cfg, by_mode: dict, *, sustained=None, engine_clocks: dict | None = None,
                 engine_windows: dict | None = None) -> dict:
    """{mode: {"floor_ms", "measured_ms", "efficiency"}}: per-iteration means over the measured iterations
    that processed tokens of every rank (phases: attention, expert_gemm, other, total = iteration wall; measured_ms
    also all_to_all, sync_wait, prefetch_wait over the same iterations); efficiency = floor / measured.
    Also "method" and "device". Runs in this process on the run's device (cuda:0 or cpu).

    sustained (floor_sustained.SustainedSettings): also the floor under sustained load per mode, "sustained":
    {"floor_ms", "measured_over_floor", "passes_timed", "warmup_s", "warmup_end", ...}, timed at least as long as
    the mode's measured iterations ran, in min_timed to max_timed passes (engine_windows[mode]: (t0, t1) on
    perf_counter). "clock" per mode (CUDA):
    {"floor_burst", "floor_sustained", "engine"}: gpu_clocks.clock_stats of the SM clock and power while each ran
    (floor_burst: the samples inside FloorTimer.windows, its timed calls, with how many fell inside; engine:
    engine_clocks[mode], sampled by the caller during the measured iterations)."""
    spec = cfg.model.spec()
    dtype = {"float32": torch.float32, "bf16": torch.bfloat16}[cfg.model.dtype]
    device = torch.device("cuda", 0) if cfg.run.device == "cuda" else torch.device("cpu")
    from ..engine.fp8_linear import fp8_linear_on
    timer = FloorTimer(spec, dtype, cfg.dwdp.weight_dtype, device, fp8_linear=fp8_linear_on(cfg))
    timer.gemm_ms = _memo(timer.gemm_ms)  # the same GEMM shape recurs in every iteration and layer
    timer.linear_ms = _memo(timer.linear_ms)
    timer.attention_core_ms = _memo(timer.attention_core_ms)
    timer.attention_passes_ms = _memo(timer.attention_passes_ms)
    timer.grouped_ms = _memo(timer.grouped_ms)
    out: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "linear_layers": "fp8 block scales" if timer.fp8_linear else "model dtype",
                 "method": "stock kernels timed alone per iteration's batch (bench/floor.py; docs/BENCHMARKS.md)"}
    try:
        for mode, rows in rank_batches(by_mode, spec).items():
            if not rows:
                continue
            keys = FLOOR_KEYS
            f_sum = dict.fromkeys(keys, 0.0)
            m_sum = dict.fromkeys((*keys, *COMM_PHASES), 0.0)
            flops = dict.fromkeys((*keys[:3], "attention_proj", "attention_core"), 0.0)
            f_core = f_passes = 0.0
            per_iter: dict[str, list[float]] = {k: [] for k in keys}
            burst = _sampler(device)  # the clock while the burst floor's kernels run
            with burst:
                for _rank, it, batch in rows:
                    f = timer.iteration_ms(batch)
                    f_core += f["attention_core"]
                    f_passes += f["attention_passes"]
                    m = _measured(it)
                    for k in keys:
                        if f[k] > 0:
                            per_iter[k].append(m[k] / f[k])
                    for k in keys:
                        f_sum[k] += f[k]
                    for k in m_sum:
                        m_sum[k] += m[k]
                    for k, v in timer.iteration_flops(batch).items():
                        flops[k] += v
            n = len(rows)
            floor = {k: v / n for k, v in f_sum.items()}
            floor["attention_core"] = f_core / n
            floor["attention_passes"] = f_passes / n  # part of attention_proj, shown apart
            # everything of the attention floor but the core: the projection GEMMs and the passes, which scale with
            # the same T and S; the planner prices it by the projections' FLOPs (perf/floor_calibration.py), so its
            # attention floor stays the one these ratios are measured against
            floor["attention_proj"] = floor["attention"] - floor["attention_core"]
            meas = {k: v / n for k, v in m_sum.items()}
            out[mode] = {"iterations": n, "floor_ms": floor, "measured_ms": meas,
                         "efficiency": {k: (floor[k] / meas[k] if meas[k] > 0 else None) for k in keys},
                         "measured_over_floor": over_floor(meas, floor),
                         # per iteration measured / floor, median over iterations: one-time costs inside a measured
                         # iteration (a kernel compiled there, say) move the mean ratio above, not this one
                         "measured_over_floor_median": {k: (statistics.median(v) if v else None)
                                                        for k, v in per_iter.items()},
                         # achieved rates: the floor's kernels and the engine, on the same FLOPs
                         "floor_tflops": {k: (flops[k] / n / (floor[k] * 1e-3) / 1e12 if floor[k] > 0 else None) for k in flops},
                         "engine_tflops": {k: (flops[k] / n / (meas[k] * 1e-3) / 1e12 if meas.get(k, 0) > 0 else None)
                                           for k in keys[:3]}}
            # the burst floor's clock: only samples inside its timed calls (not buffer fills, host work, gaps)
            clock = {"floor_burst": burst.stats(windows=timer.windows),
                     "engine": (engine_clocks or {}).get(mode)}
            if sustained is not None:
                out[mode]["sustained"], clock["floor_sustained"] = _sustained(timer, rows, meas, device, sustained,
                                                                             (engine_windows or {}).get(mode))
            if any(v is not None for v in clock.values()):  # sampled (CUDA): a CPU floor has no clock to show
                out[mode]["clock"] = clock
    finally:
        timer.release()
    return out


def _sustained(timer: FloorTimer, rows, meas: dict, device: torch.device, settings, window) -> tuple[dict, dict | None]:
    """floor_report's "sustained" entry of one mode and the clock while its timed passes ran."""
    from .floor_sustained import sustained_floor
    measure_s = (window[1] - window[0]) if window else None
    sampler = _sampler(device)
    with sampler:
        res = sustained_floor(timer, [batch for _rank, _it, batch in rows], measure_s, settings)
    win = res.pop("window")
    res["measured_over_floor"] = over_floor(meas, res["floor_ms"])
    res["engine_span_s"] = measure_s
    res["method"] = ("the floor's kernels replayed back to back, every measured iteration in order, after a warm-up "
                     "to a steady pass time (bench/floor_sustained.py)")
    return res, sampler.stats(*win)
