"""MLA attention core on the H200: which stock kernel runs causal attention with qk head dim 192 and v 128 fastest.

    python3 scripts/dev/bench_attention_options.py [--seq 8192] [--segments 2] [--heads 128]

Times (median of CUDA-event timings, ms per call over all segments), each checked against the math
reference on a slice: SDPA flash with v zero-padded to 192; SDPA cuDNN with v 128 (if this torch allows
d_v != d_qk there); SDPA efficient with v 128; torch varlen flash with v padded (one call for all segments).
Also: torch.compile of the engine's rms_norm / rope / SwiGLU elementwise chains vs eager.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def bench(fn, iters=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--segments", type=int, default=2)
    ap.add_argument("--heads", type=int, default=128)
    args = ap.parse_args()
    L, N, dqk, dv = args.seq, args.heads, 192, 128
    dev = "cuda"
    q = torch.randn(args.segments, N, L, dqk, device=dev, dtype=torch.bfloat16)
    k = torch.randn_like(q)
    v = torch.randn(args.segments, N, L, dv, device=dev, dtype=torch.bfloat16)
    scale = dqk ** -0.5
    ref = F.scaled_dot_product_attention(q[:1, :2, :1024].float(), k[:1, :2, :1024].float(), v[:1, :2, :1024].float(),
                                         is_causal=True, scale=scale)
    rows = []

    def check(o):
        err = ((o[:1, :2, :1024].float() - ref).norm() / ref.norm()).item()
        return err

    def run(name, backend, vv, slice_v):
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, vv, is_causal=True, scale=scale)
                o = o[..., :dv] if slice_v else o
                err = check(o)
                ms = bench(lambda: F.scaled_dot_product_attention(q, k, vv, is_causal=True, scale=scale))
            rows.append((name, ms, err))
        except Exception as e:  # noqa: BLE001 - a backend refusing these shapes is a result
            rows.append((name, float("nan"), f"refused: {type(e).__name__}: {str(e)[:120]}"))

    vpad = F.pad(v, (0, dqk - dv))
    run("flash, v padded to 192", SDPBackend.FLASH_ATTENTION, vpad, True)
    run("cudnn, v 128", SDPBackend.CUDNN_ATTENTION, v, False)
    run("cudnn, v padded to 192", SDPBackend.CUDNN_ATTENTION, vpad, True)
    run("efficient, v 128", SDPBackend.EFFICIENT_ATTENTION, v, False)
    flops = args.segments * N * (L * L / 2) * 2 * (dqk + dv)
    print(f"MLA core: {args.segments} x {L} causal, {N} heads, qk {dqk}, v {dv}; useful TFLOP {flops / 1e12:.2f}")
    for name, ms, err in rows:
        tf = flops / (ms * 1e-3) / 1e12 if ms == ms else float("nan")
        print(f"  {name:28s} {ms:8.3f} ms  {tf:6.0f} TFLOP/s  rel err {err}")

    # elementwise chains: eager vs torch.compile
    from dwdp_trtllm.engine.layers import apply_rope, rms_norm
    T = args.segments * L
    x = torch.randn(T, 7168, device=dev, dtype=torch.bfloat16)
    w = torch.rand(7168, device=dev, dtype=torch.float32)
    h = torch.randn(T, 4096, device=dev, dtype=torch.bfloat16)
    r = torch.randn(T, N, 64, device=dev, dtype=torch.bfloat16)
    cos, sin = torch.rand(T, 32, device=dev), torch.rand(T, 32, device=dev)

    def swiglu(h):
        return (F.silu(h[:, :2048].float()) * h[:, 2048:].float()).to(h.dtype)
    for name, fn, inp in [("rms_norm [T,7168]", lambda a: rms_norm(a, w, 1e-6), (x,)),
                          ("rope [T,128,64]", lambda a: apply_rope(a, cos, sin, True), (r,)),
                          ("swiglu [T,4096]", swiglu, (h,))]:
        e = bench(lambda: fn(*inp))
        try:
            c = torch.compile(fn, dynamic=True)
            c(*inp)
            cm = bench(lambda: c(*inp))
            same = (c(*inp).float() - fn(*inp).float()).abs().max().item()
        except Exception as ex:  # noqa: BLE001
            cm, same = float("nan"), f"compile failed: {ex!s:.100}"
        print(f"  {name:20s} eager {e:7.3f} ms  compiled {cm:7.3f} ms  max|diff| {same}")


if __name__ == "__main__":
    main()
