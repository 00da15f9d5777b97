"""FP8 block-scale linear layers, the DeepSeek-V3 recipe: 1x128 activation groups, 128x128 weight blocks.

What an FP8 checkpoint's deployment runs for every linear layer it quantises (attention projections, dense MLPs,
shared experts; `fp8_linear_names`): y = dequant(q(x)) @ dequant(w)^T, x quantised per 1x128 group at run time,
w the checkpoint's e4m3 codes times its own `*_scale_inv` per 128x128 block (or, for seeded weights, our
quantisation of them, weights.quantize_fp8_blockwise).

Kernel (CUDA): torch._scaled_mm's block-scale recipe (BlockWise1x128 x BlockWise128x128, cuBLASLt on sm_90),
chosen by measurement over the plugin's CUTLASS sm90 blockwise grouped GEMM with one group (docs/BENCHMARKS.md,
section "FP8 linear layers"). It reads the scales outer-dim-major: scale_a [M, K/128] as a view of a [K/128, M]
buffer (quant_cuda.py writes it so), scale_b [K/128, N/128] as the transpose of the checkpoint's contiguous
[N/128, K/128] scale_inv, whose rows cuBLASLt reads 16-byte aligned: K/128 must be a multiple of 4
(`kernel_takes_k`; other K take the reference). Rows are padded to ROWS_TO (the scale buffer's leading dimension is M: cuBLASLt reads
it with 16-byte aligned strides) and out-features to a multiple of 128 at load (kv_a_proj: 576 -> 640 rows of
zero codes); both paddings are sliced off the output.
Reference (CPU, and shapes the kernel does not take): the same quantisation of x (ops/reference.py), both
operands dequantised to float32, one float32 matmul, rounded to x's dtype (`fp8_linear_reference`).

Shape legend: T rows (tokens), K in features, N out features, KB = ceil(K/128), NB = ceil(N/128).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.expert_buffers import FP8_DTYPE as FP8
from ..spec.models import ModelSpec
from ..ops.reference import dequantize_fp8_blockwise, quantize_fp8_blockwise
from ..spec.weight_formats import FP8_BLOCK as BLOCK  # 128x128 weight blocks, 1x128 activation groups
from .fused import _BODIES, fused, fused_enabled
#: activation rows are padded to a multiple of this for the CUDA kernel (the outer-dim-major scale stride is M)
ROWS_TO = 16

#: the dense weights an FP8 DeepSeek-V3/R1 (or Qwen3 FP8) release stores as e4m3 + 128x128 `_scale_inv`: every
#: attention projection, dense MLP and shared-expert matrix. Not the embedding, head, norms or router.
_FP8_LINEAR = re.compile(r"^model\.layers\.\d+\.(self_attn\.[a-z_]+_proj(_with_mqa)?|mlp\.(shared_experts\.)?"
                         r"(gate|up|down)_proj)\.weight$")


def fp8_linear_names(spec: ModelSpec) -> list[str]:
    """Names (weights.dense_weight_shapes) of the linear layers an FP8 checkpoint of `spec` quantises."""
    from .weights import dense_weight_shapes
    return [n for n, s in dense_weight_shapes(spec).items() if len(s) == 2 and _FP8_LINEAR.match(n)]


@dataclass(eq=False)
class Fp8Linear:
    """One FP8 block-scale weight: w_NK e4m3 codes and scale_NbKb float32 multipliers (w ~= w_NK * scale per
    128x128 block, the checkpoint's `_scale_inv` convention). `out_features` is N before any padding of w_NK."""

    w_NK: torch.Tensor
    scale_NbKb: torch.Tensor
    out_features: int
    #: gate | up of the same SwiGLU MLP as one weight (gate and up are row views of it): one GEMM for both
    gate_up: "Fp8Linear | None" = None

    @classmethod
    def from_codes(cls, w_NK: torch.Tensor, scale_NbKb: torch.Tensor) -> "Fp8Linear":
        N, K = w_NK.shape
        if w_NK.dtype != FP8 or tuple(scale_NbKb.shape) != (-(-N // BLOCK), -(-K // BLOCK)):
            raise ValueError(f"Fp8Linear: expected float8_e4m3fn [N, K] codes with [ceil(N/128), ceil(K/128)] scales, "
                             f"got {w_NK.dtype} {tuple(w_NK.shape)} and {tuple(scale_NbKb.shape)}")
        w, s = w_NK.contiguous(), scale_NbKb.float().contiguous()
        if w.is_cuda and N % BLOCK:  # whole 128-row blocks: zero codes, scale 1 (their outputs are sliced off)
            Np = -(-N // BLOCK) * BLOCK
            w = torch.cat([w, w.new_zeros(Np - N, K)])
        return cls(w, s, N)

    @classmethod
    def quantize(cls, w_NK: torch.Tensor) -> "Fp8Linear":
        """Our 128x128 quantisation of a float weight (seeded models; weights.quantize_fp8_blockwise)."""
        q, s = quantize_fp8_blockwise(w_NK.float(), (BLOCK, BLOCK))
        return cls.from_codes(q, s)

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.w_NK.shape[1]

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """w [N, K] = codes x block scales in `dtype` (the reference's weight)."""
        return dequantize_fp8_blockwise(self.w_NK[:self.out_features], self.scale_NbKb, (BLOCK, BLOCK), dtype)

    def rows(self, lo: int, hi: int) -> "Fp8Linear":
        """Out-features [lo, hi) as a view; both on 128-row block boundaries (or hi = out_features)."""
        if lo % BLOCK or (hi % BLOCK and hi != self.out_features):
            raise ValueError(f"Fp8Linear.rows({lo}, {hi}): not on 128-row block boundaries")
        return Fp8Linear.from_codes(self.w_NK[lo:hi], self.scale_NbKb[lo // BLOCK:-(-hi // BLOCK)])

    def nbytes(self) -> int:
        return self.w_NK.numel() + self.scale_NbKb.numel() * 4


@dataclass(frozen=True)
class Fp8Act:
    """x [T, K] quantised once for several FP8 linears of the same input: q [Tp, K] e4m3 (Tp >= T padded rows),
    scale [Tp, KB] float32 outer-dim-major, as quant_cuda writes them."""

    q: torch.Tensor
    scale: torch.Tensor
    rows: int
    dtype: torch.dtype


def padded_rows(T: int) -> int:
    """Rows the kernel computes for T activation rows (T rounded up to ROWS_TO): a buffer passed as `linear(out=)`
    with at least this many rows takes the GEMM's output in place."""
    return -(-T // ROWS_TO) * ROWS_TO


def kernel_takes_k(K: int) -> bool:
    """cuBLASLt reads the [N/128, K/128] weight scales with 16-byte aligned rows: K/128 a multiple of 4. Measured on
    the H200 (2026-12-03): K = 256 gave a relative error of 0.35 against the reference with no error raised;
    K = 512, 1024, 1536, 2048, 7168 gave 7e-4. Every DeepSeek-R1 linear has K/128 a multiple of 4."""
    return K % (4 * BLOCK) == 0


def kernel_usable(x: torch.Tensor, w: Fp8Linear) -> bool:
    """The CUDA kernel takes this (x, w): CUDA bf16/fp16, kernel_takes_k(K), the quantiser's Triton on."""
    return (x.is_cuda and w.w_NK.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and kernel_takes_k(x.shape[-1])
            and hasattr(torch, "_scaled_mm") and fused_enabled())


def quantize(x_TK: torch.Tensor) -> Fp8Act:
    """x quantised per 1x128 group in the kernel's layout (CUDA, K % 128 == 0)."""
    from .quant_cuda import quant_1x128
    q, s = quant_1x128(x_TK, rows_to=ROWS_TO, scale_col_major=True)
    return Fp8Act(q, s, x_TK.shape[0], x_TK.dtype)


def prepare_parts(parts_TK: list[torch.Tensor], w) -> "torch.Tensor | Fp8Act":
    """prepare(torch.cat(parts_TK), w) without the concatenation where `w` runs the kernel: each part quantised into
    its rows of one Fp8Act (quant_cuda.quant_1x128_parts; e.g. the attention output of every chunk read by o_proj).
    Otherwise the concatenation (the part itself when there is one). parts_TK: at least one [T_i, K] part, one K
    for all (ValueError otherwise, on every path: quant_cuda.check_row_parts)."""
    from .quant_cuda import check_row_parts, quant_1x128_parts
    check_row_parts(parts_TK, "prepare_parts: parts_TK")
    T = sum(p.shape[0] for p in parts_TK)
    if isinstance(w, Fp8Linear) and T and kernel_usable(parts_TK[0], w):
        q, s = quant_1x128_parts(parts_TK, rows_to=ROWS_TO, scale_col_major=True)
        return Fp8Act(q, s, T, parts_TK[0].dtype)
    return torch.cat(parts_TK) if len(parts_TK) > 1 else parts_TK[0]


def prepare(x_TK: torch.Tensor, w) -> "torch.Tensor | Fp8Act":
    """x quantised once when `w` (an Fp8Linear) runs the kernel on it, else x: pass the result to `linear` for
    every weight that reads the same x (q_a and kv_a; q, k and v)."""
    return quantize(x_TK) if isinstance(w, Fp8Linear) and kernel_usable(x_TK, w) and x_TK.shape[0] else x_TK


def _mm(a: Fp8Act, w: Fp8Linear, out: torch.Tensor | None) -> torch.Tensor:
    """[Tp, Np] = blockwise scaled GEMM; into out[:Tp] when out has the rows, dtype and width for it."""
    b_KN, sb_KbNb = w.w_NK.t(), w.scale_NbKb.t()
    Tp, Np = a.q.shape[0], w.w_NK.shape[0]
    if out is not None and out.shape[0] >= Tp and out.shape[1] == Np and out.dtype == a.dtype and out.is_contiguous():
        try:
            return torch._scaled_mm(a.q, b_KN, a.scale, sb_KbNb, out_dtype=a.dtype, out=out[:Tp])
        except TypeError:  # a torch without the out= overload: the caller copies
            pass
    return torch._scaled_mm(a.q, b_KN, a.scale, sb_KbNb, out_dtype=a.dtype)


def fp8_linear_reference(x_TK: torch.Tensor, w: Fp8Linear) -> torch.Tensor:
    """The recipe's definition: x quantised per 1x128 group (ops/reference.py), both operands dequantised to
    float32, one float32 matmul, rounded to x's dtype. Runs anywhere."""
    q, s = quantize_fp8_blockwise(x_TK, (1, BLOCK))
    x_f = dequantize_fp8_blockwise(q, s, (1, BLOCK), torch.float32)
    return (x_f @ w.dequantized(torch.float32).t()).to(x_TK.dtype)


def linear(x, w, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """y [T, N] = x @ w^T for a plain weight (F.linear) or an Fp8Linear (kernel or reference); x is a tensor or
    the Fp8Act of `prepare`. With out (CUDA kernel only) the rows are written into out[:T] when it fits; the
    result may be a view of a padded buffer (rows beyond T, columns beyond N dropped)."""
    if not isinstance(w, Fp8Linear):
        return F.linear(x, w) if out is None else torch.mm(x, w.t(), out=out[:x.shape[0]])
    if isinstance(x, torch.Tensor):
        if not kernel_usable(x, w) or x.shape[0] == 0:
            y = fp8_linear_reference(x, w)
            return y if out is None else out[:y.shape[0]].copy_(y)
        x = quantize(x)
    y = _mm(x, w, out)[:x.rows]
    if w.out_features != y.shape[1]:
        y = y[:, :w.out_features]
    if out is not None and y.data_ptr() != out.data_ptr():  # the kernel could not write into out: copy
        y = out[:x.rows].copy_(y)
    return y


def swiglu(x_TK: torch.Tensor, gate, up, down) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) for plain weights (three F.linear) or FP8 linears: on the kernel path one GEMM
    for gate | up (gate.gate_up), the SwiGLU fused with the down projection's 1x128 quantisation
    (quant_cuda.silu_mul_quant), then down. The reference rounds the SwiGLU to x's dtype before quantising it, as
    the fused kernel does."""
    if isinstance(gate, Fp8Linear) and gate.gate_up is not None and kernel_usable(x_TK, gate) and kernel_takes_k(down.w_NK.shape[1]) and x_TK.shape[0]:
        from .quant_cuda import silu_mul_quant
        h_T2I = linear(quantize(x_TK), gate.gate_up)
        q, s = silu_mul_quant(h_T2I, rows_to=ROWS_TO, scale_col_major=True)
        return linear(Fp8Act(q, s, x_TK.shape[0], x_TK.dtype), down)
    xin = prepare(x_TK, gate)
    g_TI, u_TI = linear(xin, gate), linear(xin, up)
    return linear((fused("silu_mul_pair", g_TI) or _BODIES["silu_mul_pair"])(g_TI, u_TI), down)


def to_fp8_linears(spec: ModelSpec, weights: dict[str, torch.Tensor]) -> dict[str, object]:
    """`weights` with every fp8_linear_names tensor as an Fp8Linear: the checkpoint's own codes and scales where
    weights carries `<name>_scale_inv` beside e4m3 codes, else our 128x128 quantisation of the float weight.
    A SwiGLU's gate and up become row views of one gate | up weight when the split is on a 128-row block
    boundary. The `_scale_inv` entries are consumed (codes of other tensors are dequantised to float32)."""
    linears = set(fp8_linear_names(spec))
    out: dict[str, object] = dequantize_linears({k: v for k, v in weights.items() if k not in linears
                                                 and k[:-len("_scale_inv")] not in linears}, lambda n: weights[n].dtype
                                                if weights[n].dtype != FP8 else torch.float32)
    for name in fp8_linear_names(spec):
        t, s = weights[name], weights.get(name + "_scale_inv")
        out[name] = Fp8Linear.from_codes(t, s) if s is not None and t.dtype == FP8 else Fp8Linear.quantize(t)
    for name in fp8_linear_names(spec):
        if not name.endswith("gate_proj.weight"):
            continue
        up_name = name[:-len("gate_proj.weight")] + "up_proj.weight"
        g, u = out[name], out[up_name]
        I = g.out_features
        if I % BLOCK == 0 and u.out_features == I:
            both = Fp8Linear.from_codes(torch.cat([g.w_NK[:I], u.w_NK[:I]]), torch.cat([g.scale_NbKb, u.scale_NbKb]))
            g2, u2 = both.rows(0, I), both.rows(I, 2 * I)
            g2.gate_up = both
            out[name], out[up_name] = g2, u2
    return out


def dequantize_linears(weights: dict[str, torch.Tensor], dtype_of) -> dict[str, torch.Tensor]:
    """`weights` with e4m3 codes that carry `<name>_scale_inv` dequantised (float32, then dtype_of(name)), the
    scale entries consumed: what a model with FP8 linears off computes with (the dequantised reference)."""
    out = {}
    for k, v in weights.items():
        if k.endswith("_scale_inv"):
            continue
        s = weights.get(k + "_scale_inv")
        if s is not None and v.dtype == FP8:
            v = dequantize_fp8_blockwise(v, s.float(), (BLOCK, BLOCK), torch.float32)
        out[k] = v.to(dtype_of(k))
    return out


def fp8_linear_on(cfg) -> bool:
    """Whether a bench config's linear layers run as FP8 block-scale GEMMs: model.fp8_linear when set; null follows
    dwdp.weight_dtype (fp8: an FP8 checkpoint computed as a Hopper deployment computes it, every layer it
    quantises in FP8; otherwise the model dtype)."""
    v = getattr(cfg.model, "fp8_linear", None)
    return cfg.dwdp.weight_dtype == "fp8" if v is None else bool(v)
