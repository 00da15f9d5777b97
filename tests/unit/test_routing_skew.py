"""routing_skew: the per-layer popularity sources, their caps, the per-rank statistics and the counts file."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dwdp_trtllm.spec.routing_skew import (RoutingSkewConfig, cap_shares, contiguous_placement, dep_expert_skew,
                                      expected_max_over_mean, load_counts_file, popularity, popularity_table,
                                      rank_shares, rank_token_split, split_counts)
from dwdp_trtllm.spec.schema import ConfigError


def test_none_is_uniform():
    p = popularity(RoutingSkewConfig(), 3, 64, 6)
    assert np.allclose(p, 1 / 64)
    assert expected_max_over_mean(p, 8) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["power_law", "zipf"])
def test_parametric_is_deterministic_capped_and_per_layer(kind):
    spec = RoutingSkewConfig(kind=kind, alpha=1.2, seed=7)
    a = popularity_table(spec, 4, 256, 8)
    b = popularity_table(spec, 4, 256, 8)
    assert np.array_equal(a, b)
    assert np.allclose(a.sum(1), 1.0)
    assert (a <= 1 / 8 + 1e-12).all()
    assert not np.allclose(a[0], a[1])  # each layer its own draw
    # layer l's vector does not depend on how many layers were asked for
    assert np.array_equal(popularity_table(spec, 2, 256, 8), a[:2])
    other = popularity_table(RoutingSkewConfig(kind=kind, alpha=1.2, seed=8), 1, 256, 8)
    assert not np.allclose(other[0], a[0])


def test_power_law_reproduces_aiconfigurator_ep8_penalty_band():
    """aiconfigurator's EP8 power_law/balanced latency ratios at DeepSeek shapes are 1.4-1.7 (alpha 1.01) and
    1.5-2.0 (alpha 1.2) (shared/reference/aiconfigurator-crosscheck.md section 3); the straggler factor of our
    draw of the same shape, averaged over 58 layers, must land in those bands and grow with alpha."""
    lo = dep_expert_skew(RoutingSkewConfig(kind="power_law", alpha=1.01), 58, 256, 8, 8).mean()
    hi = dep_expert_skew(RoutingSkewConfig(kind="power_law", alpha=1.2), 58, 256, 8, 8).mean()
    assert 1.4 <= lo <= 1.7
    assert 1.5 <= hi <= 2.0
    assert hi > lo
    # fewer, larger EP ranks average more experts: smaller straggler factor
    assert dep_expert_skew(RoutingSkewConfig(kind="power_law", alpha=1.01), 58, 256, 8, 4).mean() < lo


def test_zipf_grows_with_alpha():
    f = [dep_expert_skew(RoutingSkewConfig(kind="zipf", alpha=a), 16, 64, 4, 8).mean() for a in (0.0, 0.5, 1.0)]
    assert f[0] == pytest.approx(1.0)
    assert f[0] < f[1] < f[2]


def test_cap_shares_water_fills():
    p = cap_shares(np.array([10.0, 1, 1, 1, 1]), 0.5)
    assert p[0] == pytest.approx(0.5)
    assert np.allclose(p[1:], 0.125)
    with pytest.raises(ValueError):
        cap_shares(np.ones(3), 0.2)


def test_rank_shares_and_split():
    p = np.array([0.4, 0.1, 0.3, 0.2])
    assert np.allclose(rank_shares(p, contiguous_placement(4, 2)), [0.5, 0.5])
    assert np.allclose(rank_shares(p, [[0, 1], [0, 2, 3]]), [0.3, 0.7])  # expert 0 on two ranks splits evenly
    assert expected_max_over_mean(p, 4) == pytest.approx(1.6)
    split = rank_token_split(p, 10, 2, 4)
    assert split.tolist() == [8, 2, 6, 4] and split.sum() == 20
    assert split_counts(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]
    with pytest.raises(ValueError, match="no rank"):
        rank_shares(p, [[0, 1], [2]])


def test_counts_file_pt_and_json(tmp_path):
    counts = torch.zeros(2, 5, 8, dtype=torch.int32)  # [steps, layers, experts]; layer 0 dense (zeros)
    counts[:, 1:, :] = torch.arange(1, 9, dtype=torch.int32)
    counts[0, 3, 0] = 100
    pt = tmp_path / "expert_distribution_recorder_1.pt"
    torch.save({"rank": 0, "logical_count": counts, "average_utilization_rate_over_window": None}, pt)
    moe = load_counts_file(str(pt), 8)
    assert moe.shape == (4, 8)  # dense row dropped, steps summed
    assert moe[2, 0] == 101  # 100 (step 0) + 1 (step 1)
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"logical_count": counts.sum(0).tolist()}))
    assert np.array_equal(load_counts_file(str(js), 8), moe)
    spec = RoutingSkewConfig(kind="file", path=str(pt))
    table = popularity_table(spec, 6, 8, 2)  # more MoE layers than the file: rows cycle
    assert np.array_equal(table[4], table[0])
    assert np.allclose(table[1], np.arange(1, 9) / 36)


@pytest.mark.parametrize("content, expected", [
    ("not json", "could not read"),
    ('{"x": 1}', "logical_count"),
    ('{"logical_count": [[0, 0], [0, 0]]}', "zero"),
    ('{"logical_count": [1, 2]}', "shape"),
])
def test_counts_file_errors_name_the_key(tmp_path, content, expected):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(ConfigError, match=expected) as e:
        load_counts_file(str(f))
    assert e.value.key == "routing_skew.path"


def test_counts_file_expert_mismatch(tmp_path):
    f = tmp_path / "c.json"
    f.write_text('{"logical_count": [[1, 2, 3]]}')
    with pytest.raises(ConfigError, match="3 experts"):
        load_counts_file(str(f), 8)


def test_config_checks():
    with pytest.raises(ConfigError, match="alpha"):
        RoutingSkewConfig(kind="zipf", alpha=-1)
    with pytest.raises(ConfigError, match="path"):
        RoutingSkewConfig(kind="file")
    with pytest.raises(ConfigError, match="path"):
        RoutingSkewConfig(kind="zipf", path="x.pt")
    assert RoutingSkewConfig(kind="power_law", alpha=1.2, seed=3).label() == "power_law_1.2 (seed 3)"


def test_contiguous_placement_is_the_engines():
    from dwdp_trtllm.engine.dep import expert_range
    for E, R in [(256, 8), (10, 3), (7, 7), (12, 5)]:
        assert [(ex[0], ex[-1] + 1) for ex in contiguous_placement(E, R)] == [expert_range(E, r, R) for r in range(R)]


def test_bench_config_sweeps_and_refuses_a_bad_counts_file(tmp_path, capsys):
    """workload.routing_skew sweeps like any key; a bad counts file stops `dwdp bench` with exit 2 and one line
    naming the file and key, before any rank starts (nothing is written under --out)."""
    import yaml

    from dwdp_trtllm import cli
    from dwdp_trtllm.spec.config import load_bench_points

    keys, points = load_bench_points({"workload": {"routing_skew": {"kind": ["none", "zipf"], "alpha": 1.2}}})
    assert [p.workload.routing_skew.kind for p in points] == ["none", "zipf"]
    bad = tmp_path / "counts.json"
    bad.write_text('{"logical_count": [[1, 2, 3]]}')  # 3 experts; tiny has 16
    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump({"workload": {"routing_skew": {"kind": "file", "path": str(bad)}},
                                   "run": {"device": "cpu", "ranks": 2}}))
    out = tmp_path / "out"
    assert cli.main(["bench", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "workload.routing_skew.path" in err and "3 experts" in err and str(bad) in err
    assert not out.exists()
