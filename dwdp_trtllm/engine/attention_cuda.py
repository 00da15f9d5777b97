"""The attention core on CUDA: cuDNN's fused SDPA kernel for causal chunks, v at its own head dim.

Why cuDNN: MLA has qk head dim 192 and v 128. torch's flash kernels need one head dim (v zero-padded to 192)
and run the DeepSeek-R1 core at 269 TFLOP/s on the H200; cuDNN takes v at 128 and runs it at 559 TFLOP/s
(2 x 8K causal, 128 heads: 20.4 ms vs 9.8 ms; docs/history/benchmarks-2026-12.md section 6).

Why buckets: cuDNN builds an execution plan per new shape (about 65 ms each on the H200, measured: a layer-0
attention of 216-569 ms against 15-21 ms in layers 1-2 of the same iteration). Every chunk length would be a new
plan, so the causal call runs on the chunk padded at its end to a multiple of BUCKET rows: with a top-left causal
mask the real queries never see the padded keys, and the padded queries are dropped, so the result is exact.
`warm_plans(...)` builds every bucket up to max_num_tokens once, before timing starts.

A chunk with a cached prefix (chunked prefill) needs a causal mask aligned to the bottom right. Two exact ways:
- split (attend_bucketed): its keys split in two: the prefix [0, P), which every query of the chunk sees (flash,
  non-causal, v padded: no per-shape plan), and the chunk's own keys [P, S), seen causally (cuDNN, bucketed as
  above). Both return their log-sum-exp and the partial outputs merge exactly:
  o = (o1 e^(lse1-m) + o2 e^(lse2-m)) / (e^(lse1-m) + e^(lse2-m)), m = max(lse1, lse2).
- front (causal_over_prefix): one top-left causal cuDNN call over S = P + L rows whose last L queries are the
  chunk's: query P + i sees keys [0, P + i], which is the bottom-right mask of the chunk. The first P query rows
  are dummies (any finite rows: each query row is independent) and their outputs are dropped. It runs on the
  same square bucket plans as a chunk without prefix, v at its own head dim, with no flash call and no merge, but
  computes the P^2 / 2 dummy pairs. `prefix_as_causal` picks the cheaper of the two per chunk.

Shape legend: L queries of the chunk, P cached prefix keys, S = P + L keys, N heads, d qk head dim, e v head dim.
"""
from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F

from .fused import _lse_merge, fused

#: causal cuDNN calls run on the chunk padded to a multiple of this many rows (bounded plan count)
BUCKET = 256

#: flash with v zero-padded to the qk head dim runs the MLA core at this fraction of cuDNN's rate on the H200
#: (2 x 8192 causal, 128 heads, qk 192, v 128: 269 vs 559 useful TFLOP/s; docs/history/benchmarks-2026-12.md section 7)
FLASH_OVER_CUDNN = 269 / 559

#: rows up to which warm_plans built the causal plans, per device index (absent: none built in this process)
_warm_rows: dict[int, int] = {}


def bucket(n: int) -> int:
    return -(-n // BUCKET) * BUCKET


def _cudnn(q, k, v, *, causal: bool, scale: float):
    """(out [1, N, L, e], lse [1, N, L] float32) of one cuDNN SDPA call; inputs [1, N, L|S, d|e]."""
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
    lse = out[1]
    return out[0], lse.reshape(lse.shape[0], lse.shape[1], lse.shape[2])


def _flash(q, k, v, *, scale: float):
    """(out [1, N, L, e], lse) of one non-causal flash call (v zero-padded to d, output sliced back)."""
    e, d = v.shape[-1], q.shape[-1]
    vp = F.pad(v, (0, d - e)) if e < d else v
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, vp, 0.0, False, False, scale=scale)
    lse = out[1]
    return out[0][..., :e], lse.reshape(lse.shape[0], lse.shape[1], lse.shape[2])


def _pad_rows(x_LNd: torch.Tensor, rows: int) -> torch.Tensor:
    return x_LNd if x_LNd.shape[0] == rows else F.pad(x_LNd, (0, 0, 0, 0, 0, rows - x_LNd.shape[0]))


def causal_chunk(q_LNd: torch.Tensor, k_LNd: torch.Tensor, v_LNe: torch.Tensor, scale: float, lse: bool = False):
    """Causal self-attention of a chunk (no prefix) with cuDNN on the bucketed length: out_LNe (and lse_NL)."""
    L = q_LNd.shape[0]
    Lb = bucket(L)
    q, k, v = (_pad_rows(t, Lb).transpose(0, 1)[None] for t in (q_LNd, k_LNd, v_LNe))
    o, s = _cudnn(q, k, v, causal=True, scale=scale)
    return (o[:, :, :L], s[:, :, :L]) if lse else o[0, :, :L].transpose(0, 1)


@functools.cache
def cudnn_attention_usable(device_index: int) -> bool:
    """cuDNN SDPA runs here for bf16 with qk and v head dims that differ (probed once per device)."""
    try:
        q = torch.randn(BUCKET, 2, 64, device=f"cuda:{device_index}", dtype=torch.bfloat16)
        causal_chunk(q, q, q[..., :32], 0.125)
        return True
    except RuntimeError as exc:
        warnings.warn(f"cuDNN attention unusable on cuda:{device_index} ({str(exc)[:160]}): using flash", RuntimeWarning)
        return False


def attend_cudnn(q_LNd: torch.Tensor, k_SNd: torch.Tensor, v_SNe: torch.Tensor, prefix: int, scale: float) -> torch.Tensor:
    """Causal attention of one chunk over its cached prefix + itself: out_LNe (q's dtype). k/v have q's head count."""
    if prefix == 0:
        return causal_chunk(q_LNd, k_SNd, v_SNe, scale)
    o2, lse2 = causal_chunk(q_LNd, k_SNd[prefix:], v_SNe[prefix:], scale, lse=True)
    q, k, v = (t.transpose(0, 1)[None] for t in (q_LNd, k_SNd[:prefix], v_SNe[:prefix]))
    o1, lse1 = _flash(q, k, v, scale=scale)
    merge = fused("lse_merge", o1) or _lse_merge
    return merge(o1, lse1, o2, lse2)[0].transpose(0, 1)


def prefix_as_causal(L: int, prefix: int, d: int, e: int, device_index: int = 0) -> bool:
    """Whether a chunk of L queries over `prefix` cached keys runs as one causal call over prefix + chunk
    (causal_over_prefix) rather than as the causal chunk + a flash call over the prefix + the merge (attend_bucketed).
    What each computes beyond the chunk's own causal part, in FLOPs at cuDNN's rate: split 2 L P (d + d) /
    FLASH_OVER_CUDNN (L P pairs, 2 d FLOPs for q.k and 2 d for p.v: flash computes v at d), front
    ((P + L)^2 - L^2) (d + e) (((P + L)^2 - L^2) / 2 extra causal pairs, dummy rows included, 2 (d + e) each);
    front when it is the smaller (about P < 3 L at MLA's 192 / 128). Never for a bucket above the rows
    warm_plans built on this device (no plan built inside a measured iteration)."""
    if prefix <= 0:
        return False
    warm = _warm_rows.get(device_index)
    if warm is not None and bucket(prefix + L) > warm:
        return False
    split = 4 * L * prefix * d / FLASH_OVER_CUDNN
    front = ((prefix + L) ** 2 - L ** 2) * (d + e)
    return front < split


def causal_over_prefix(q_Nd: torch.Tensor, k_Nd: torch.Tensor, v_Ne: torch.Tensor, L: int, prefix: int,
                       scale: float) -> torch.Tensor:
    """The chunk whose L queries are q rows [prefix, prefix + L), over keys [0, prefix + L) (its cached prefix, then
    its own keys), as one causal cuDNN call over the first bucket(prefix + L) rows of q, k, v (views that hold them).
    q rows [0, prefix) are dummy queries (anything finite; dropped); rows past prefix + L may hold anything finite
    (only dropped queries see them). out_LNe, a view of cuDNN's [S, N, e] output."""
    Sb = bucket(prefix + L)
    q, k, v = (t[:Sb].transpose(0, 1)[None] for t in (q_Nd, k_Nd, v_Ne))
    o, _ = _cudnn(q, k, v, causal=True, scale=scale)
    return o[0, :, prefix:prefix + L].transpose(0, 1)


def warm_plans(num_heads: int, d: int, e: int, max_rows: int, device: torch.device, dtype=torch.bfloat16) -> int:
    """Build cuDNN's plan of every causal bucket up to max_rows now, not during timing.
    Returns the number of buckets."""
    if not cudnn_attention_usable(device.index or 0):
        return 0
    n = 0
    for rows in range(BUCKET, bucket(max_rows) + 1, BUCKET):
        q = torch.randn(rows, num_heads, d, device=device, dtype=dtype)
        v = torch.randn(rows, num_heads, e, device=device, dtype=dtype)
        causal_chunk(q, q, v, d ** -0.5)  # one plan per bucket: every call asks cuDNN for the lse too
        n += 1
    # a chunk with a prefix once: compiles the lse merge and loads the flash kernel before any timing
    q = torch.randn(2 * BUCKET, num_heads, d, device=device, dtype=dtype)
    v = torch.randn(2 * BUCKET, num_heads, e, device=device, dtype=dtype)
    attend_bucketed(q, q, v, BUCKET, BUCKET, d ** -0.5)
    torch.cuda.synchronize(device)
    _warm_rows[device.index or 0] = max(_warm_rows.get(device.index or 0, 0), bucket(max_rows))
    return n


def attend_bucketed(q_Nd: torch.Tensor, k_Nd: torch.Tensor, v_Ne: torch.Tensor, L: int, prefix: int,
                    scale: float) -> torch.Tensor:
    """attend_cudnn on views that already hold at least bucket(L) rows past the chunk start (q) and past the
    prefix (k, v): q rows [0, L) are the chunk, k / v rows [0, prefix) its cached prefix and [prefix, prefix + L)
    its own keys; rows after those may hold anything finite (only dropped queries see them). out_LNe."""
    Lb = bucket(L)
    q = q_Nd[:Lb].transpose(0, 1)[None]
    kc, vc = k_Nd[prefix:prefix + Lb].transpose(0, 1)[None], v_Ne[prefix:prefix + Lb].transpose(0, 1)[None]
    o2, lse2 = _cudnn(q, kc, vc, causal=True, scale=scale)
    if prefix == 0:
        return o2[0, :, :L].transpose(0, 1)
    kp, vp = k_Nd[:prefix].transpose(0, 1)[None], v_Ne[:prefix].transpose(0, 1)[None]
    o1, lse1 = _flash(q[:, :, :L], kp, vp, scale=scale)
    merge = fused("lse_merge", o1) or _lse_merge
    return merge(o1, lse1, o2[:, :, :L], lse2[:, :, :L])[0].transpose(0, 1)
