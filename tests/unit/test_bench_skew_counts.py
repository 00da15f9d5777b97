"""A routing-skew counts file (workload.routing_skew kind file) is read once, by load_sweep in the parent: every
point of a sweep shares that reading, the ranks get the popularity table from the parent and read no file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dwdp_trtllm import cli
from dwdp_trtllm.bench import runner
from dwdp_trtllm.bench.sweep import load_sweep
from dwdp_trtllm.spec.routing_skew import RoutingSkewConfig, load_counts_file, popularity_table

E = 16  # the tiny preset's experts


def _counts_file(tmp_path: Path) -> Path:
    f = tmp_path / "counts.json"
    rows = [[0] * E] + [[(7 * l + 3 * e) % 11 + 1 for e in range(E)] for l in range(3)]  # a dense row, 3 MoE rows
    f.write_text(json.dumps({"logical_count": rows}))
    return f


def _config(tmp_path: Path, counts: Path, **workload) -> Path:
    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"preset": "tiny", "dtype": "float32"}, "dwdp": {"dwdp_size": 2, "weight_dtype": "float32"},
        "workload": {"isl": 64, "requests_per_rank": 3, "max_num_tokens": 64,
                     "routing_skew": {"kind": "file", "path": str(counts)}, **workload},
        "run": {"device": "cpu", "ranks": 2, "modes": ["dep", "dwdp"], "timeout_s": 240}}))
    return cfg


@pytest.fixture
def reads(monkeypatch):
    """Paths read through Path.read_text (load_counts_file reads a .json counts file that way)."""
    seen, real = [], Path.read_text

    def spy(self, *a, **kw):
        seen.append(Path(self).resolve())
        return real(self, *a, **kw)
    monkeypatch.setattr(Path, "read_text", spy)
    return seen


def test_a_sweep_reads_the_counts_file_once_and_every_point_gets_its_table(tmp_path, reads):
    counts = _counts_file(tmp_path)
    swept, points = load_sweep(_config(tmp_path, counts), ["workload.isl=[64, 96]"])
    assert swept == ["workload.isl"] and len(points) == 2
    assert reads.count(counts.resolve()) == 1, reads  # was: once per point (BenchConfig read it on construction)
    expected = popularity_table(RoutingSkewConfig(kind="file", path=str(counts)), points[0].config.model.spec()
                                .num_moe_layers, E, points[0].config.model.spec().top_k,
                                load_counts_file(str(counts), E))
    for p in points:
        assert np.array_equal(p.popularity_LE(), expected)
    assert reads.count(counts.resolve()) == 2  # the reference reading just above; popularity_LE read nothing


def test_a_bad_counts_file_given_by_set_blames_set(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"logical_count": [[1, 2, 3]]}')  # 3 experts; tiny has 16
    cfg = _config(tmp_path, _counts_file(tmp_path))
    out = tmp_path / "out"
    assert cli.main(["bench", str(cfg), "--out", str(out), "--set", f"workload.routing_skew.path={bad}"]) == 2
    err = capsys.readouterr().err
    assert f"--set (over {cfg}): workload.routing_skew.path" in err and "3 experts" in err and str(bad) in err, err
    assert not out.exists()


@pytest.mark.slow  # the real engine, two modes of two ranks: ~15 s on 2 cores
@pytest.mark.timeout(900)
def test_ranks_read_no_counts_file(tmp_path):
    """The counts file is removed once the sweep is loaded, before any rank starts: the run still steers routing
    to the file's popularity (was: every rank read the file per mode, and the report read it again)."""
    from dwdp_trtllm.engine.launcher import run_mode as engine_run_mode

    counts = _counts_file(tmp_path)
    got = []

    def run_mode(cfg, mode, queues, progress=None, **kw):
        counts.unlink(missing_ok=True)
        got.append(kw.get("popularity_LE"))
        return engine_run_mode(cfg, mode, queues, progress=progress, **kw)

    result = runner.run_bench(_config(tmp_path, counts), out_dir=tmp_path / "out", run_mode=run_mode, plots=False)
    assert not counts.exists() and len(got) == 2 and np.array_equal(got[0], got[1])
    (run,) = result["runs"]
    assert result["consistent"], run["consistency"]
    target = run["metrics"]["dep"]["expert_load"]["target_max_over_mean_per_layer"]
    assert len(target) == got[0].shape[0] and min(target) > 1.0  # the file's uneven counts, not uniform routing
