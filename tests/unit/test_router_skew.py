"""Routing skew in the engine's router: exact popularity, distinct experts, determinism, off = untouched."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_router import _assert_same, _loop_grouped  # the independent reference of the router

from dwdp_trtllm.engine.router import SkewTable, router_logits, select_experts, skew_uniforms
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig, expected_max_over_mean, popularity_table


@pytest.mark.parametrize("name, kind, alpha", [("deepseek-v3", "power_law", 1.2), ("deepseek-v3", "zipf", 1.01),
                                               ("olmoe-1b-7b", "zipf", 0.8), ("tiny", "zipf", 1.5)])
def test_skewed_choices_reach_the_target_popularity(name, kind, alpha):
    spec = get_model(name)
    E, K, T = spec.num_experts, spec.top_k, 20000
    pop = popularity_table(RoutingSkewConfig(kind=kind, alpha=alpha, seed=3), 2, E, K)
    table = SkewTable(pop, K, "cpu", seed=3)
    logits = torch.randn(T, E, generator=torch.Generator().manual_seed(5))
    bias = torch.zeros(E) if spec.router == "sigmoid_grouped" else None
    for m in range(2):
        ids, w = select_experts(spec, logits, bias, skew=table, moe_layer=m)
        assert ids.shape == (T, K) and ids.dtype == torch.int64 and w.dtype == torch.float32
        assert (ids.sort(-1).values.diff(dim=-1) > 0).all()  # K distinct experts per token
        share = torch.bincount(ids.reshape(-1), minlength=E).double().numpy() / (T * K)
        # systematic sampling: inclusion probability exactly K * share; sampling noise only
        assert np.abs(share - pop[m]).max() < 4 * np.sqrt(pop[m].max() / (T * K)) + 1e-3
        # the straggler factor the pure module predicts is what the router produces
        got = expected_max_over_mean(share, 8 if E >= 8 else 2)
        want = expected_max_over_mean(pop[m], 8 if E >= 8 else 2)
        assert got == pytest.approx(want, rel=0.05)
        # weights are the model's own scores at the chosen experts, finished as usual
        scores = logits.sigmoid() if spec.router == "sigmoid_grouped" else logits.softmax(-1)
        want_w = scores.gather(1, ids)
        if spec.norm_topk_prob:
            want_w = want_w / (want_w.sum(-1, keepdim=True) + 1e-20)
        torch.testing.assert_close(w, want_w * spec.routed_scaling_factor)


def test_skew_is_a_function_of_the_natural_choice_set():
    """Same tokens -> same experts (the property DEP and DWDP rely on); a permuted natural top-k order changes
    nothing; the MoE layer changes the draw."""
    ids = torch.randint(0, 256, (512, 8), generator=torch.Generator().manual_seed(0))
    u = skew_uniforms(ids, 3)
    assert torch.equal(u, skew_uniforms(ids.flip(-1), 3))
    assert not torch.equal(u, skew_uniforms(ids, 4))
    assert ((u >= 0) & (u < 1)).all()
    # roughly uniform: each tenth of [0, 1) holds 5-15 % of the tokens
    hist = torch.histc(u.float(), bins=10, min=0, max=1) / u.numel()
    assert hist.min() > 0.05 and hist.max() < 0.15


def test_off_is_bit_exact_and_on_is_deterministic():
    spec = get_model("deepseek-v3")
    g = torch.Generator().manual_seed(9)
    x, gate = torch.randn(64, 32, generator=g), torch.randn(spec.num_experts, 32, generator=g)
    logits = router_logits(x, gate)
    bias = torch.randn(spec.num_experts, generator=g) * 0.1
    a = select_experts(spec, logits, bias, skew=None, moe_layer=5)
    _assert_same(*a, *_loop_grouped(spec, logits, bias))  # off: DeepSeek's routing, as the independent loop computes it
    table = SkewTable(popularity_table(RoutingSkewConfig(kind="zipf", alpha=1.0), 1, spec.num_experts, 8), 8, "cpu")
    s1 = select_experts(spec, logits, bias, skew=table)
    s2 = select_experts(spec, logits.clone(), bias, skew=SkewTable(
        popularity_table(RoutingSkewConfig(kind="zipf", alpha=1.0), 1, spec.num_experts, 8), 8, "cpu"))
    assert torch.equal(s1[0], s2[0]) and torch.equal(s1[1], s2[1])
    assert not torch.equal(s1[0], a[0])


def test_table_refuses_unroutable_shares():
    with pytest.raises(ValueError, match="1/top_k"):
        SkewTable(np.array([[0.7, 0.1, 0.1, 0.1]]), 2, "cpu")
    with pytest.raises(ValueError, match="summing to 1"):
        SkewTable(np.array([[0.2, 0.1]]), 1, "cpu")


@pytest.mark.parametrize("name", ["deepseek-v3", "olmoe-1b-7b"])
def test_skewed_routing_computes_the_scores_once(name):
    """The [T, E] scores (sigmoid or softmax of the logits) are computed once per call: the natural selection and
    the skewed weights read the same tensor (the skew path used to run the [T, E] pass a second time)."""
    from torch.overrides import TorchFunctionMode

    passes = []

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("sigmoid", "softmax"):
                passes.append(func.__name__)
            return func(*args, **(kwargs or {}))

    spec = get_model(name)
    E, K = spec.num_experts, spec.top_k
    table = SkewTable(popularity_table(RoutingSkewConfig(kind="zipf", alpha=1.01, seed=1), 1, E, K), K, "cpu", seed=1)
    logits = torch.randn(64, E, generator=torch.Generator().manual_seed(2))
    bias = torch.zeros(E) if spec.router == "sigmoid_grouped" else None
    with Count():
        ids, w = select_experts(spec, logits, bias, skew=table, moe_layer=0)
    assert len(passes) == 1, passes
    scores = logits.sigmoid() if spec.router == "sigmoid_grouped" else logits.softmax(-1)
    want = scores.gather(1, ids)
    if spec.norm_topk_prob:
        want = want / (want.sum(-1, keepdim=True) + 1e-20)
    torch.testing.assert_close(w, want * spec.routed_scaling_factor)
