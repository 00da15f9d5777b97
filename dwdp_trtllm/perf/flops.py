"""FLOPs of one layer's compute phases (2 per multiply-add; plain formulas, tests check them by hand; pure).

bench/floor.py's iteration_flops counts the floor's work with these, so that a floor's measured rate applies to them.
"""
from __future__ import annotations

import numpy as np

from ..spec.models import ModelSpec


def attention_proj_flops(spec: ModelSpec, tokens, kv_tokens=None):
    """Projection GEMMs of `tokens` queries; MLA's kv_b runs over `kv_tokens` keys (prefix + chunk; default
    tokens, i.e. no cached prefix)."""
    t = np.asarray(tokens, float)
    out = 2.0 * spec.attention_params() * t
    if kv_tokens is not None and spec.attention == "mla":
        out = out + 2.0 * spec.kv_lora_rank * spec.num_heads * (spec.qk_nope_head_dim + spec.v_head_dim) * (
            np.asarray(kv_tokens, float) - t)
    return out


def expert_rows_flops(spec: ModelSpec, rows):
    """gate|up and down GEMMs of `rows` routed (token, expert) rows."""
    return 6.0 * spec.hidden_size * spec.moe_intermediate * np.asarray(rows, float)


def routed_expert_flops(spec: ModelSpec, tokens):
    """The routed experts of `tokens` tokens: top_k rows each."""
    return expert_rows_flops(spec, spec.top_k * np.asarray(tokens, float))


def shared_and_router_flops(spec: ModelSpec, tokens):
    H = spec.hidden_size
    return (6.0 * H * spec.moe_intermediate * spec.num_shared_experts + 2.0 * H * spec.num_experts) * np.asarray(tokens, float)


def dense_mlp_flops(spec: ModelSpec, tokens):
    return 6.0 * spec.hidden_size * spec.dense_intermediate * np.asarray(tokens, float)


def core_flops(spec: ModelSpec, length, prefix=0.0, windowed: bool = True):
    """Causal attention core of one segment of `length` queries after `prefix` cached keys, per layer:
    QK^T and PV over the prefix and the lower triangle of the chunk (what bench/floor.py counts).

    windowed (a model with sliding-window layers, ModelSpec.sliding_window): the mean over the layers, a sliding
    layer's query at position x attending to min(x, window) keys: integral of min(x, w) over [p, p + n] =
    (c^2 - p^2) / 2 + w (p + n - c) with c = clip(w, p, p + n) (= n p + n^2 / 2 when w >= p + n). windowed=False:
    full causal attention on every layer (what a kernel table's rate per request is stated for)."""
    if spec.attention == "mla":
        d_qk, d_v = spec.qk_nope_head_dim + spec.qk_rope_head_dim, spec.v_head_dim
    else:
        d_qk = d_v = spec.head_dim
    n, p = np.asarray(length, float), np.asarray(prefix, float)
    keys = n * p + n * n / 2
    w, share = spec.sliding_window, min(spec.sliding_window_layers, spec.num_layers) / spec.num_layers
    if windowed and w > 0 and share > 0:
        c = np.clip(float(w), p, p + n)
        keys = (1 - share) * keys + share * ((c * c - p * p) / 2 + w * (p + n - c))
    return 2.0 * spec.num_heads * (d_qk + d_v) * keys
