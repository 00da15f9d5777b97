"""The CUDA attention layout logic (engine/attention_cuda.py + MLAAttention._cudnn_kv and the per-chunk calls)
checked on the CPU:
cuDNN's and flash's calls are replaced by an exact math stand-in with the same contract (out, log-sum-exp),
so what is tested is ours: bucketed lengths read in place from the q/k/v buffers with spare rows, the split of
a chunk with a cached prefix into prefix keys + its own causal keys, and the log-sum-exp merge."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from dwdp_trtllm.engine import attention_cuda, layers
from dwdp_trtllm.engine.kv_cache import KVCache
from dwdp_trtllm.engine.model import build_reference_model
from dwdp_trtllm.engine.records import Segment
from dwdp_trtllm.spec.models import get_model


def _math(q, k, v, *, causal: bool, scale: float):
    """[1, N, L, d] x [1, N, S, d] -> (out [1, N, L, e], lse [1, N, L]); causal is top-left aligned, like cuDNN's."""
    s = torch.einsum("bnld,bnsd->bnls", q.double(), k.double()) * scale
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.einsum("bnls,bnse->bnle", (s - lse[..., None]).exp(), v.double()).to(q.dtype), lse.float()


@pytest.fixture
def bucketed_path(monkeypatch):
    calls = {"cudnn": [], "flash": 0}

    def cudnn(q, k, v, causal, scale):
        calls["cudnn"].append(q.shape[2])
        return _math(q, k, v, causal=causal, scale=scale)

    def flash(q, k, v, scale):
        calls["flash"] += 1
        return _math(q, k, v, causal=False, scale=scale)
    monkeypatch.setattr(attention_cuda, "BUCKET", 64)
    monkeypatch.setattr(layers, "BUCKET", 64)
    monkeypatch.setattr(attention_cuda, "_cudnn", cudnn)
    monkeypatch.setattr(attention_cuda, "_flash", flash)
    monkeypatch.setattr(layers, "_cudnn_ok", lambda q, k: True)
    return calls


def _run(spec):
    model = build_reference_model(spec, 5, torch.float32, "cpu", gemm="reference", weight_dtype="float32")
    kv = KVCache(spec.num_layers)
    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(0, spec.vocab_size, (150,), generator=g), torch.randint(0, spec.vocab_size, (70,), generator=g)
    h1 = model.forward(torch.cat([b, a[:90]]), [Segment(0, 0, 70, True), Segment(1, 0, 90, False)], kv)
    h2 = model.forward(torch.cat([a[90:], b[:1]]), [Segment(1, 90, 60, True), Segment(2, 0, 1, True)], kv)
    return h1, h2


@pytest.mark.parametrize("front", [False, True])
def test_bucketed_cudnn_layout_equals_the_cpu_path(bucketed_path, monkeypatch, front):
    """front False: the chunk with a cached prefix (request 1: 60 queries after 90 cached tokens) splits into a flash
    call over its prefix + its causal chunk, merged; front True: one causal call over prefix + chunk with the prefix
    rows before it in the q buffer as dummy queries (attention_cuda.causal_over_prefix). Both equal the CPU path."""
    monkeypatch.setattr(layers, "prefix_as_causal", lambda L, P, d, e, dev=0: P > 0 and front)
    spec = dataclasses.replace(get_model("tiny"), qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12)
    got = _run(spec)
    calls = bucketed_path
    assert calls["cudnn"] and all(n % 64 == 0 for n in calls["cudnn"]), calls["cudnn"]  # bucketed lengths only
    # the one chunk with a cached prefix, once per layer: a flash call, or one causal call over bucket(90 + 60) rows
    assert calls["flash"] == (0 if front else spec.num_layers)
    assert calls["cudnn"].count(192) == (spec.num_layers if front else 0)
    monkeypatch.setattr(layers, "_cudnn_ok", lambda q, k: False)  # the plain CPU path
    want = _run(spec)
    for g_, w_ in zip(got, want):
        torch.testing.assert_close(g_, w_, rtol=1e-5, atol=1e-5)


def test_part_timer_times_the_parts_of_mla_and_changes_nothing(bucketed_path, monkeypatch):
    """layers.PART_TIMER (diagnostics, scripts/profile_engine.py): every layer of the cuDNN path is timed as
    attn.q, attn.kv, attn.core, attn.o, in that order, and the outputs are those of an untimed run."""
    from dwdp_trtllm.engine.timing import PhaseTimer
    spec = dataclasses.replace(get_model("tiny"), qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12)
    want = _run(spec)
    timer = PhaseTimer(torch.device("cpu"))
    monkeypatch.setattr(layers, "PART_TIMER", timer)
    timer.start()
    got = _run(spec)
    spans = timer.collect()
    for g_, w_ in zip(got, want):
        torch.testing.assert_close(g_, w_, rtol=0, atol=0)
    parts = ["attn.q", "attn.kv", "attn.core", "attn.o"]
    assert [n for n, _, _, _ in spans] == parts * (2 * spec.num_layers)  # two forwards
    assert [layer for _, layer, _, _ in spans[:8]] == [0] * 4 + [1] * 4
    assert all(e >= s for _, _, s, e in spans)


def test_prefix_as_causal_compares_the_work_of_both_ways(monkeypatch):
    """MLA (qk 192, v 128): one causal call over prefix + chunk when its extra pairs cost less than the flash call
    over the prefix at flash's rate (about P < 3 L); never above the buckets warm_plans built on the device."""
    monkeypatch.setattr(attention_cuda, "_warm_rows", {})
    f = attention_cuda.prefix_as_causal
    assert not f(4096, 0, 192, 128)
    assert f(3072, 5120, 192, 128) and f(6145, 417, 192, 128)  # DeepSeek-R1 8K chunked-prefill tails
    assert not f(1420, 6744, 192, 128) and not f(100, 8000, 192, 128)  # a short tail after a long prefix
    L = 4096
    P = max(p for p in range(1, 8 * L, 64) if f(L, p, 192, 128))
    assert 2.5 * L < P < 3.5 * L
    monkeypatch.setattr(attention_cuda, "_warm_rows", {0: 8192})
    assert f(3072, 5120, 192, 128) and not f(3072, 5121, 192, 128) and f(3072, 5121, 192, 128, 1)
