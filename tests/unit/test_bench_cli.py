"""`dwdp bench` end to end on the synthetic engine: files, consistency, resume, overrides, sweeps, configs."""
import csv
import json
from pathlib import Path

import pytest
import yaml

from dwdp_trtllm import cli
from dwdp_trtllm.bench import runner
from dwdp_trtllm.bench.plots import plot_ratios
from dwdp_trtllm.bench.sweep import load_sweep
from dwdp_trtllm.bench.synthetic import synthetic_run_mode
from dwdp_trtllm.spec.schema import ConfigError

REPO = Path(__file__).resolve().parents[2]
GiB = 1 << 30

CFG = {
    "model": {"preset": "tiny", "dtype": "float32"},
    "dwdp": {"dwdp_size": 2, "weight_dtype": "float32"},
    "workload": {"isl": 200, "imbalance_cv": [0.0, 0.2], "requests_per_rank": 10, "max_num_tokens": 256},
    "run": {"device": "cpu", "ranks": 2, "modes": ["dep", "dwdp"]},
}


@pytest.fixture
def cfg_file(tmp_path):
    p = tmp_path / "bench.yaml"
    p.write_text(yaml.safe_dump(CFG))
    return p


def test_cli_end_to_end_files_exist_and_are_consistent(cfg_file, tmp_path, engine, capsys, assert_run_consistent):
    out = tmp_path / "out"
    assert cli.main(["bench", str(cfg_file), "--out", str(out)]) == 0
    assert sorted(engine) == sorted([(m, cv) for m in ("dep", "dwdp") for cv in (0.0, 0.2)])
    text = capsys.readouterr().out
    assert "DWDP/DEP" in text and "workload.imbalance_cv=0.2" in text
    data = json.loads((out / "results.json").read_text())
    assert len(data["runs"]) == 2
    for run in data["runs"]:
        assert set(run) >= {"config", "point", "env", "metrics", "consistency"}
        assert run["config"]["workload"]["imbalance_cv"] == run["point"]["workload.imbalance_cv"]
        assert set(run["env"]) >= {"device", "device_name", "torch", "python", "git_commit", "hostname", "date"}
        assert_run_consistent(run)
        dep, dwdp = run["metrics"]["dep"], run["metrics"]["dwdp"]
        assert dep["layer_us"]["all_to_all"] > 0 and dwdp["layer_us"]["copy"] > 0
    imbalanced = data["runs"][1]["metrics"]["dep"]["layer_us"]["sync_wait"]
    assert imbalanced > data["runs"][0]["metrics"]["dep"]["layer_us"]["sync_wait"]
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["mode"], r["point.workload.imbalance_cv"]) for r in rows] == [
        ("dep", "0.0"), ("dwdp", "0.0"), ("dep", "0.2"), ("dwdp", "0.2")]
    assert float(rows[1]["ratio.tps_per_gpu"]) == pytest.approx(
        float(rows[1]["tps_per_gpu"]) / float(rows[0]["tps_per_gpu"]))
    pngs = sorted((out / "plots").glob("*.png"))
    assert [p.name for p in pngs if p.name.startswith("ratio")] == ["ratio_workload.imbalance_cv.png"]
    assert len([p for p in pngs if p.name.startswith("timeline_")]) == 2
    assert all(p.stat().st_size > 5000 for p in pngs)


def test_resume_skips_finished_points(cfg_file, tmp_path, engine, capsys):
    out = tmp_path / "out"
    runner.run_bench(cfg_file, out_dir=out, plots=False)
    assert len(engine) == 4
    first = json.loads((out / "results.json").read_text())
    engine.clear()
    runner.run_bench(cfg_file, out_dir=out, plots=False)
    assert engine == [] and "skipping 2 finished point(s)" in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["runs"] == first["runs"]
    # an interrupted sweep: one point file missing, one truncated -> both rerun, nothing else
    files = sorted((out / "points").glob("*.json"))
    files[0].unlink()
    files[1].write_text('{"config": ')
    runner.run_bench(cfg_file, out_dir=out, plots=False)
    assert len(engine) == 4
    engine.clear()
    # a changed value is a new point; the old ones are kept but not reported
    runner.run_bench(cfg_file, ["workload.imbalance_cv=0.1"], out_dir=out, plots=False)
    assert engine == [("dep", 0.1), ("dwdp", 0.1)]
    assert len(json.loads((out / "results.json").read_text())["runs"]) == 1


def test_bad_set_key_or_value_is_a_config_error_naming_it(cfg_file, tmp_path, engine, capsys):
    with pytest.raises(ConfigError) as e:
        runner.run_bench(cfg_file, ["workload.nope=3"], out_dir=tmp_path / "o")
    assert e.value.key == "workload.nope" and "--set" in str(e.value)
    assert cli.main(["bench", str(cfg_file), "--set", "workload.isl=-5", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "workload.isl" in err and "config error" in err
    with pytest.raises(ConfigError, match="--ranks.*run.ranks"):
        runner.run_bench(cfg_file, ranks=0, out_dir=tmp_path / "o")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        runner.run_bench(cfg_file, ["workload.isl"], out_dir=tmp_path / "o")
    assert engine == []


def test_every_point_is_validated_before_any_runs(cfg_file, tmp_path, engine):
    with pytest.raises(ConfigError, match="workload.max_num_tokens"):
        runner.run_bench(cfg_file, ["workload.max_num_tokens=[256, 0]"], out_dir=tmp_path / "o")
    assert engine == []


def test_sweeps_expand_as_a_cross_product_with_overrides(cfg_file):
    keys, points = load_sweep(cfg_file, ["workload.isl=[100, 300, 500]", "run.ranks=4"], device="cpu")
    assert keys == ["workload.isl", "workload.imbalance_cv"]
    assert [p.values for p in points] == [{"workload.isl": i, "workload.imbalance_cv": c}
                                          for i in (100, 300, 500) for c in (0.0, 0.2)]
    assert all(p.config.run.ranks == 4 for p in points)
    assert len({p.key for p in points}) == 6
    again = load_sweep(cfg_file, ["workload.isl=[100, 300, 500]", "run.ranks=4"])[1]
    assert [p.key for p in again] == [p.key for p in points]  # stable across loads
    assert len(load_sweep(cfg_file, ["workload.imbalance_cv=[0.2, 0.2]"])[1]) == 1  # duplicates run once


def test_single_point_plot_and_categorical_sweep(cfg_file, tmp_path, engine):
    res = runner.run_bench(cfg_file, ["workload.imbalance_cv=0.2"], out_dir=tmp_path / "a")
    assert [p.name for p in res["files"]["plots"]][0] == "ratio.png"
    res = runner.run_bench(cfg_file, ["workload.isl_dist=[fixed, normal]", "workload.isl_cv=0.3"],
                           out_dir=tmp_path / "b", plots=False)
    paths = plot_ratios(res["runs"], res["swept"], tmp_path / "p")
    assert sorted(p.name for p in paths) == ["ratio_workload.imbalance_cv.png", "ratio_workload.isl_dist.png"]
    assert all(p.stat().st_size > 5000 for p in paths)


def test_synthetic_dep_runs_lockstep_iterations():
    from dwdp_trtllm.spec.workload import generate_requests
    from dwdp_trtllm.spec.config import BenchConfig
    from dwdp_trtllm.spec.schema import from_dict

    cfg = from_dict(BenchConfig, {**CFG, "workload": {**CFG["workload"], "imbalance_cv": 0.3}})
    queues = generate_requests(cfg.workload, 2)
    dep = synthetic_run_mode(cfg, "dep", queues)
    dwdp = synthetic_run_mode(cfg, "dwdp", queues)
    assert len(dep[0].iterations) == len(dep[1].iterations)  # empty iterations pad the light rank
    assert len(dwdp[0].iterations) < len(dwdp[1].iterations)


def _merge_transient(cfg) -> int:
    """Bytes gemm: merge materialises per MoE call (all experts' w13; fp8 goes through fp32)."""
    spec = cfg.model.spec()
    elems = spec.num_experts * 2 * spec.moe_intermediate * spec.hidden_size
    return elems * (2 if cfg.dwdp.weight_dtype == "bf16" else 1 + 4 + 4 + 2)


@pytest.mark.parametrize("name", ["quickstart", "ci_smoke", "h200_smoke", "h200_r1_g2", "h200_r1_g3_fp8",
                                  "h200_r1_g4_fp8"])
def test_shipped_configs_load_and_gpu_ones_fit_one_h200(name):
    from dwdp_trtllm.deploy.memory import estimate_group_memory
    from dwdp_trtllm.core.placement import make_placement

    _, points = load_sweep(REPO / "configs" / "bench" / f"{name}.yaml")
    assert points
    for p in points:
        cfg = p.config
        if cfg.run.device == "cpu":
            assert cfg.model.preset.startswith("tiny") and cfg.run.ranks <= 4
            continue
        spec = cfg.model.spec()
        assert spec.num_moe_layers >= (1 if name == "h200_smoke" else 2)
        ests = estimate_group_memory(spec, cfg.dwdp, make_placement(cfg.dwdp, spec.num_experts),
                                     max_num_tokens=cfg.workload.max_num_tokens)
        per_rank = [e.total + GiB for e in ests]  # + CUDA context, NCCL and allocator slack
        if cfg.dwdp.gemm == "merge":
            per_rank = [b + _merge_transient(cfg) for b in per_rank]
        total = sum(per_rank[r % len(per_rank)] for r in range(cfg.run.ranks))
        assert total < 135 * GiB, f"{name} {p.values}: {total / GiB:.1f} GiB on one H200"
