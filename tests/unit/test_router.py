"""Routers against a straightforward per-token loop on random logits."""
import dataclasses
import math

import pytest
import torch

from dwdp_trtllm.engine.router import router_logits, select_experts
from dwdp_trtllm.spec.models import get_model



def _loop_grouped(spec, logits, bias):
    ids_out, w_out = [], []
    pg = spec.num_experts // spec.n_group
    for row in logits.tolist():
        scores = [1 / (1 + math.exp(-v)) for v in row]
        choice = [s + b for s, b in zip(scores, bias.tolist())]
        gscore = [sum(sorted(choice[g * pg:(g + 1) * pg], reverse=True)[:2]) for g in range(spec.n_group)]
        groups = sorted(range(spec.n_group), key=lambda g: -gscore[g])[:spec.topk_group]
        cand = [e for g in groups for e in range(g * pg, (g + 1) * pg)]
        ids = sorted(cand, key=lambda e: -choice[e])[:spec.top_k]
        w = [scores[e] for e in ids]
        if spec.norm_topk_prob:
            w = [x / sum(w) for x in w]
        ids_out.append(ids)
        w_out.append([x * spec.routed_scaling_factor for x in w])
    return ids_out, w_out


def _loop_softmax(spec, logits):
    ids_out, w_out = [], []
    for row in logits.tolist():
        m = max(row)
        ex = [math.exp(v - m) for v in row]
        p = [x / sum(ex) for x in ex]
        ids = sorted(range(len(p)), key=lambda e: -p[e])[:spec.top_k]
        w = [p[e] for e in ids]
        if spec.norm_topk_prob:
            w = [x / sum(w) for x in w]
        ids_out.append(ids)
        w_out.append([x * spec.routed_scaling_factor for x in w])
    return ids_out, w_out


def _assert_same(ids, w, ref_ids, ref_w):
    assert ids.dtype == torch.int64 and w.dtype == torch.float32
    for t in range(ids.shape[0]):
        got = dict(zip(ids[t].tolist(), w[t].tolist()))
        want = dict(zip(ref_ids[t], ref_w[t]))
        assert set(got) == set(want), f"token {t}: {sorted(got)} vs {sorted(want)}"
        for e in want:
            assert got[e] == pytest.approx(want[e], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", ["tiny", "deepseek-v3"])
def test_grouped_sigmoid_matches_loop(name):
    spec = get_model(name)
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(48, spec.num_experts, generator=g) * 2
    bias = torch.randn(spec.num_experts, generator=g) * 0.3
    ids, w = select_experts(spec, logits, bias)
    _assert_same(ids, w, *_loop_grouped(spec, logits, bias))
    # Only topk_group groups are used per token.
    pg = spec.num_experts // spec.n_group
    assert max(len(set((ids[t] // pg).tolist())) for t in range(ids.shape[0])) <= spec.topk_group


@pytest.mark.parametrize("name", ["tiny-gqa", "deepseek-v2-lite", "olmoe-1b-7b"])
def test_softmax_matches_loop(name):
    spec = get_model(name)
    logits = torch.randn(40, spec.num_experts, generator=torch.Generator().manual_seed(2)) * 2
    ids, w = select_experts(spec, logits)
    _assert_same(ids, w, *_loop_softmax(spec, logits))
    if spec.norm_topk_prob:
        torch.testing.assert_close(w.sum(-1), torch.full((40,), spec.routed_scaling_factor))
    else:
        assert (w.sum(-1) < 1).all()


def test_bias_steers_selection_not_weights():
    spec = dataclasses.replace(get_model("tiny"), routed_scaling_factor=1.0)
    logits = torch.randn(16, spec.num_experts, generator=torch.Generator().manual_seed(3))
    bias = torch.zeros(spec.num_experts)
    bias[5] = 10.0
    ids, w = select_experts(spec, logits, bias)
    assert (ids == 5).any(-1).all()
    scores = logits.sigmoid().gather(1, ids)
    torch.testing.assert_close(w, scores / scores.sum(-1, keepdim=True))


def test_router_logits_float32_and_bad_shape():
    spec = get_model("tiny")
    x = torch.randn(5, spec.hidden_size, dtype=torch.bfloat16)
    gate = torch.randn(spec.num_experts, spec.hidden_size, dtype=torch.bfloat16)
    assert router_logits(x, gate).dtype == torch.float32
    with pytest.raises(ValueError, match="logits_TE"):
        select_experts(spec, torch.randn(5, spec.num_experts + 1))


def test_selections_without_scores_compute_them_with_router_scores(monkeypatch):
    """select_grouped_sigmoid / select_softmax called without scores_TE (bench_moe_kernels, the CUDA router test)
    compute them with router_scores, the one scores formula, of their own kind; the output is bit-identical to
    passing router_scores' scores."""
    from dwdp_trtllm.engine import router
    g = torch.Generator().manual_seed(4)
    grouped, soft = get_model("tiny"), get_model("olmoe-1b-7b")
    lg, ls = torch.randn(24, grouped.num_experts, generator=g), torch.randn(24, soft.num_experts, generator=g)
    bias = torch.randn(grouped.num_experts, generator=g) * 0.3
    want_g = router.select_grouped_sigmoid(grouped, lg, bias, scores_TE=router.router_scores(grouped, lg))
    want_s = router.select_softmax(soft, ls, scores_TE=router.router_scores(soft, ls))
    kinds, real = [], router.router_scores

    def spy(spec, logits_TE, **kw):
        kinds.append(kw.get("router"))
        return real(spec, logits_TE, **kw)
    monkeypatch.setattr(router, "router_scores", spy)
    got_g = router.select_grouped_sigmoid(grouped, lg, bias)
    # a spec of the other kind: the selection still scores by its own kind
    got_s = router.select_softmax(dataclasses.replace(soft, router="sigmoid_grouped"), ls)
    assert kinds == ["sigmoid_grouped", "softmax"]
    for got, want in ((got_g, want_g), (got_s, want_s)):
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
