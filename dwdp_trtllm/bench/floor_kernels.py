"""The floor's kernels as closures (bench/floor.py's module docstring says which kernels and why): each `*_fn`
returns a closure of one timed piece of one layer (None for no work), which FloorTimer (bench/floor_timer.py) times
alone, the burst floor, and bench/floor_sustained.py replays back to back, the floor under sustained load: the same
kernels in both. Buffers are random (never zeros), allocated once per shape and reused. The `*_gemms` lists give
(op, m, n, k) of a layer's GEMMs (op_fn makes their closures).

Shape legend: T tokens of the iteration, S keys (cached prefixes included), H hidden, E experts, I intermediate,
A routed rows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..spec.models import ModelSpec


class FloorKernels:
    """The floor's kernel closures on one device (module docstring); FloorTimer times them."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, weight_dtype: str, device: torch.device, *,
                 fp8_linear: bool = False):
        self.spec, self.dtype, self.weight_dtype, self.device = spec, dtype, weight_dtype, device
        #: the linear layers an FP8 checkpoint quantises run as FP8 block-scale GEMMs (CUDA; elsewhere model dtype)
        self.fp8_linear = fp8_linear and device.type == "cuda" and hasattr(torch, "_scaled_mm")
        self._bufs: dict[tuple, torch.Tensor] = {}
        self._gen = torch.Generator(device=device).manual_seed(0)

    # ---- buffers ------------------------------------------------------------------------------------
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

    # ---- GEMMs --------------------------------------------------------------------------------------
    def gemm_fn(self, m: int, n: int, k: int):
        """[m, k] @ [k, n] at the model dtype (nn.Linear layout: weight [n, k])."""
        if m == 0:
            return None
        x, w = self._buf((m, k)), self._buf((n, k))
        return lambda: F.linear(x, w)

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

    def op_fn(self, op: str, m: int, n: int, k: int):
        """The closure of one GEMM of a *_gemms list: op "gemm" (model dtype) or "linear" (FP8 with fp8_linear)."""
        return (self.gemm_fn if op == "gemm" else self.linear_fn)(m, n, k)

    # ---- attention ----------------------------------------------------------------------------------
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

    # ---- experts and MLPs ---------------------------------------------------------------------------
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

    def release(self) -> None:
        self._bufs.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
