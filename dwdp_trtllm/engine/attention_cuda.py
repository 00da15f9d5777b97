"""The attention core on CUDA: cuDNN's fused SDPA kernel, one call per segment, v at its own head dim.

Why cuDNN: MLA has qk head dim 192 and v 128. torch's flash kernels need one head dim (v zero-padded to 192)
and run the DeepSeek-R1 core at 269 TFLOP/s on the H200; cuDNN takes v at 128 and runs it at 559 TFLOP/s
(2 x 8K causal, 128 heads: 20.4 ms vs 9.8 ms; docs/BENCHMARKS.md section 6).

A chunk with a cached prefix (chunked prefill) needs a causal mask aligned to the bottom right, which the
fused causal kernels do not take. Its keys split in two: the prefix [0, P), which every query of the chunk
sees, and the chunk's own keys [P, S), seen causally (top-left aligned on that block). Each half is one
cuDNN call that also returns its log-sum-exp; the two partial outputs merge exactly:
    o = (o1 * exp(lse1 - m) + o2 * exp(lse2 - m)) / (exp(lse1 - m) + exp(lse2 - m)),  m = max(lse1, lse2).

Shape legend: L queries of the chunk, P cached prefix keys, S = P + L keys, N heads, G kv heads, d qk head
dim, e v head dim.
"""
from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from .fused import _lse_merge, fused


@functools.cache
def cudnn_attention_usable(device_index: int) -> bool:
    """cuDNN SDPA is available on this GPU for bf16 (probed once per device with a tiny call)."""
    try:
        q = torch.randn(1, 2, 16, 64, device=f"cuda:{device_index}", dtype=torch.bfloat16)
        v = torch.randn(1, 2, 16, 32, device=q.device, dtype=q.dtype)
        _cudnn(q, q, v, causal=True, scale=0.125)
        return True
    except RuntimeError as exc:
        warnings.warn(f"cuDNN attention unusable on cuda:{device_index} ({str(exc)[:160]}): using flash", RuntimeWarning)
        return False


def _cudnn(q, k, v, *, causal: bool, scale: float):
    """(out [1, N, L, e], lse [1, N, L] float32 natural log) of one cuDNN SDPA call."""
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    lse = out[1]
    return out[0], lse.view(lse.shape[0], lse.shape[1], lse.shape[2])


def attend_cudnn(q_LNd: torch.Tensor, k_SGd: torch.Tensor, v_SGe: torch.Tensor, prefix: int, scale: float) -> torch.Tensor:
    """Causal attention of one chunk over its cached prefix + itself: out_LNe (q's dtype). G must equal N
    (the caller repeats kv heads for GQA)."""
    q, k, v = q_LNd.transpose(0, 1)[None], k_SGd.transpose(0, 1)[None], v_SGe.transpose(0, 1)[None]
    if prefix == 0:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        return o[0].transpose(0, 1)
    o1, lse1 = _cudnn(q, k[:, :, :prefix], v[:, :, :prefix], causal=False, scale=scale)
    o2, lse2 = _cudnn(q, k[:, :, prefix:], v[:, :, prefix:], causal=True, scale=scale)
    merge = fused("lse_merge", o1) or _lse_merge
    return merge(o1, lse1, o2, lse2)[0].transpose(0, 1)
