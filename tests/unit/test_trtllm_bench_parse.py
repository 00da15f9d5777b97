"""scripts/bench_trtllm_serving.py: parsing of benchmark_serving result JSON and derived metrics."""
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_trtllm_serving", REPO / "scripts/bench_trtllm_serving.py")
bts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bts)

# Field names as benchmark_serving.py writes them (result dict; p{N}_ttft_ms from --metric-percentiles 50,90,99).
SAMPLE = {"duration": 120.5, "completed": 64, "total_input_tokens": 471859, "total_output_tokens": 65536,
          "request_throughput": 0.531, "output_throughput": 543.9, "total_token_throughput": 4459.6,
          "user_throughput": 18.2, "mean_ttft_ms": 2510.0, "median_ttft_ms": 2301.5, "std_ttft_ms": 600.0,
          "p50_ttft_ms": 2301.5, "p90_ttft_ms": 3400.0, "p99_ttft_ms": 4100.25, "mean_tpot_ms": 52.3,
          "median_tpot_ms": 51.0, "p99_tpot_ms": 70.0, "max_concurrency": 16}


def test_parse_result_disaggregated():
    gpus = bts.total_gpus({"kind": "disaggregated", "ctx_gpus": 4, "gen_gpus": 8})
    row = bts.parse_result(SAMPLE, gpus, 16)
    assert gpus == 12 and row["concurrency"] == 16
    assert row["tps_per_gpu"] == pytest.approx(543.9 / 12)
    assert row["tps_per_user"] == pytest.approx(1000 / 52.3)
    assert (row["ttft_p50_ms"], row["ttft_p90_ms"], row["ttft_p99_ms"]) == (2301.5, 3400.0, 4100.25)
    assert row["ttft_median_ms"] == 2301.5 and "ttft_std_ms" not in row


def test_parse_result_errors_and_aggregated():
    assert bts.total_gpus({"kind": "aggregated", "gpus": 8}) == 8
    with pytest.raises(ValueError, match="kind"):
        bts.total_gpus({"kind": "mixed"})
    with pytest.raises(ValueError, match="mean_tpot_ms"):
        bts.parse_result({k: v for k, v in SAMPLE.items() if k != "mean_tpot_ms"}, 4)
    with pytest.raises(ValueError, match="completed == 0"):
        bts.parse_result({**SAMPLE, "completed": 0}, 4)
    assert bts.parse_result(SAMPLE, 4)["concurrency"] == 16  # from max_concurrency (assumed field)


def test_command_and_parse_only_outputs(tmp_path):
    cfg = {"name": "t", "model": "/m", "deployment": {"kind": "disaggregated", "ctx_gpus": 4, "gen_gpus": 4},
           "isl": 8192, "osl": 1024, "concurrency": [4, 16]}
    cmd = bts.command(cfg, 16, tmp_path)
    assert cmd[1:3] == ["-m", "tensorrt_llm.serve.scripts.benchmark_serving"]
    assert cmd[cmd.index("--max-concurrency") + 1] == "16" and cmd[cmd.index("--num-prompts") + 1] == "64"
    assert cmd[cmd.index("--random-input-len") + 1] == "8192" and "--save-result" in cmd
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    raw = tmp_path / "out" / "raw"
    raw.mkdir(parents=True)
    for c, tput in ((4, 200.0), (16, 543.9)):
        (raw / f"c{c}.json").write_text(json.dumps({**SAMPLE, "output_throughput": tput, "max_concurrency": c}))
    assert bts.main([str(tmp_path / "c.yaml"), "--out", str(tmp_path / "out"), "--parse-only"]) == 0
    res = json.loads((tmp_path / "out/results.json").read_text())
    assert [p["tps_per_gpu"] for p in res["points"]] == pytest.approx([25.0, 543.9 / 8])
    assert (tmp_path / "out/results.csv").read_text().startswith("concurrency,")
    assert (tmp_path / "out/tps_gpu_vs_tps_user.png").stat().st_size > 1000
