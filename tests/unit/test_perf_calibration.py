"""Calibration: strict schema for our file, tolerant reads of benchmark JSON."""
import json

import pytest

from dwdp_trtllm.perf.calibration import (Calibration, device_matches, interp_log, load_bench_results,
                                          load_calibration)
from dwdp_trtllm.spec.schema import ConfigError

GOOD = {
    "gpu": "h200",
    "grouped_gemm_tflops": {"bf16": [[16384, 760], [2048, 420]], "fp8": [[16384, 1091]]},
    "attention_tflops": 450.0,
    "attention_us_by_isl": [[1024, 100.0], [8192, 5000.0]],
    "hbm_tbps": 4.19,
    "peer_copy_gbps": 370,
    "slice_efficiency": [[2097152, 0.9], [262144, 0.3]],
    "all_to_all_gbps": 300,
    "interference": 1.2,
    "contention_slowdown": {"sliced": 1.02},
}


def _write(tmp_path, data, name="cal.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def test_good_file_loads_and_sorts_points(tmp_path):
    cal = load_calibration(_write(tmp_path, GOOD))
    assert cal.grouped_gemm_tflops["bf16"] == ((2048.0, 420.0), (16384.0, 760.0))
    assert cal.gemm_tflops("bf16", 16384) == 760 and cal.gemm_tflops("nvfp4", 16384) is None
    assert cal.slice_eff(2 << 20) == pytest.approx(0.9)
    assert cal.attention_us(8192) == pytest.approx(5000.0)
    assert cal.attention_us(16384) == pytest.approx(20000.0)  # quadratic beyond the measured range
    assert cal.interference == 1.2 and cal.contention_slowdown == {"sliced": 1.02}


@pytest.mark.parametrize("data,key", [
    ({"grouped_gemm_tflop": {}}, "grouped_gemm_tflop"),
    ({"grouped_gemm_tflops": {"int8": [[1, 2]]}}, "grouped_gemm_tflops.int8"),
    ({"grouped_gemm_tflops": {"bf16": [[1024, -5]]}}, "grouped_gemm_tflops.bf16[0][1]"),
    ({"grouped_gemm_tflops": {"bf16": [[1024, 5], [1024, 6]]}}, "grouped_gemm_tflops.bf16"),
    ({"slice_efficiency": [[1, 2, 3]]}, "slice_efficiency[0]"),
    ({"interference": 0.9}, "interference"),
    ({"hbm_tbps": "fast"}, "hbm_tbps"),
    ({"contention_slowdown": {"both": 1.0}}, "contention_slowdown"),
])
def test_bad_values_name_file_and_key(tmp_path, data, key):
    p = _write(tmp_path, data)
    with pytest.raises(ConfigError) as e:
        load_calibration(p)
    assert e.value.key == key and e.value.file == str(p)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_calibration(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_calibration(bad)


def test_interp_log():
    pts = ((1.0, 10.0), (100.0, 30.0))
    assert interp_log(pts, 10.0) == pytest.approx(20.0)
    assert interp_log(pts, 0.5) == 10.0 and interp_log(pts, 1e4) == 30.0


def test_device_names():
    assert device_matches("NVIDIA H200", "h200")
    assert device_matches("NVIDIA GB200", "gb200") and not device_matches("NVIDIA GB200", "b200")
    assert device_matches("NVIDIA B200", "b200") and not device_matches("NVIDIA H100 80GB HBM3", "h200")


def test_bench_json_is_read_tolerantly_and_only_for_its_gpu(tmp_path):
    gemm = {"env": {"device": "NVIDIA H200", "torch": "2.11"}, "shape": "dsv3",
            "results": [{"variant": "multi_buffer", "tokens": 8192, "tflops": 700.5, "dtype": "bf16", "extra": [1, 2]},
                        {"variant": "contiguous", "tokens": 8192, "tflops": 745.0, "dtype": "bf16"},
                        {"variant": "multi_buffer", "tokens": 16384, "tflops": 1050.0, "dtype": "fp8"},
                        {"note": "unrelated", "tokens": "many"}]}
    copy = {"device": "NVIDIA H200", "bulk_gbps": 4000.0,
            "sliced": [{"slice_bytes": 2097152, "gbps": 3600.0, "path": "batched"},
                       {"slice_bytes": 2097152, "gbps": 2000.0, "path": "per_op"},
                       {"slice_bytes": 262144, "fraction_of_bulk": 0.25}],
            "overlap": {"gemm_slowdown": 1.12}}
    other = {"device": "NVIDIA B200", "results": [{"tokens": 8192, "tflops": 2000.0}]}
    d = tmp_path / "bench_results"
    d.mkdir()
    (d / "gemm.json").write_text(json.dumps(gemm))
    (d / "copy.json").write_text(json.dumps(copy))
    (d / "b200.json").write_text(json.dumps(other))
    (d / "broken.json").write_text("[")
    cal = load_bench_results(d, "h200")
    assert cal.grouped_gemm_tflops == {"bf16": ((8192.0, 745.0),), "fp8": ((16384.0, 1050.0),)}
    assert cal.slice_efficiency == ((262144.0, 0.25), (2097152.0, 0.9))
    assert cal.interference == 1.12
    assert any("b200.json" in n for n in cal.notes) and any("broken.json" in n for n in cal.notes)
    assert load_bench_results(d, "gb200").grouped_gemm_tflops == {}
    assert load_bench_results(tmp_path / "absent", "h200") == Calibration()


def test_a_grouped_gemm_record_of_another_dtype_is_not_a_bf16_point(tmp_path):
    """A tokens + tflops record whose dtype is none of bf16 / fp8 / nvfp4 (an FP8 variant labelled "fp8_blockwise")
    was read as a BF16 grouped-GEMM point: at 1,100 TFLOP/s it would have priced BF16 experts at an FP8 rate."""
    (tmp_path / "g.json").write_text(json.dumps({"device": "NVIDIA H200", "results": [
        {"tokens": 16384, "tflops": 1100.0, "dtype": "fp8_blockwise"}, {"tokens": 16384, "tflops": 760.0}]}))
    assert load_bench_results(tmp_path, "h200").grouped_gemm_tflops == {"bf16": ((16384.0, 760.0),)}


def test_merge_prefers_the_later_source():
    a = Calibration(sources=("a",), peer_copy_gbps=300.0, hbm_tbps=4.0)
    b = Calibration(sources=("b",), peer_copy_gbps=350.0)
    m = a.merged(b)
    assert m.peer_copy_gbps == 350.0 and m.hbm_tbps == 4.0 and m.sources == ("a", "b")


def test_strict_floor_rates_and_engine_factors_drive_the_cost_model(tmp_path):
    """A calibration file's floor_tflops / engine_over_floor are the same at every size (and win over floor runs)."""
    from dwdp_trtllm.perf import cost_model as cm
    from dwdp_trtllm.perf.hardware import get_gpu
    from dwdp_trtllm.spec.models import get_model

    cal = load_calibration(_write(tmp_path, {
        "floor_tflops": {"attention_proj": 600.0, "attention_core": 450.0, "expert_gemm_fp8": 800.0, "other": 700.0},
        "engine_over_floor": {"attention": 1.2, "expert_gemm": 1.1, "other": 1.5}}))
    spec = get_model("deepseek-r1", num_layers=3, first_k_dense=1)
    p = cm.CostParams(gpu=get_gpu("h200"), weight_dtype="fp8", calibration=cal)
    rows = 16384 * 8
    want = 6.0 * spec.hidden_size * spec.moe_intermediate * rows / 800e12 * 1e6 * 1.1
    assert cm.experts_us(spec, p, rows, spec.num_experts, isl=8192) == pytest.approx(want)
    core = float(cm.core_us(spec, p, cm.core_flops(spec, 8192), 1, 8192))
    assert core == pytest.approx(float(cm.core_flops(spec, 8192)) / 450e12 * 1e6)
    att = float(cm.attention_us(spec, p, 16384, core, isl=8192))
    assert att == pytest.approx((float(cm.attention_proj_flops(spec, 16384)) / 600e12 * 1e6 + core) * 1.2)
    other = float(cm.other_us(spec, p, 16384, isl=8192))
    assert other == pytest.approx(float(cm.shared_and_router_flops(spec, 16384)) / 700e12 * 1e6 * 1.5)
    # planning for stock kernels: the floor rates stay, the engine's factors go
    import dataclasses
    floor_only = dataclasses.replace(p, calibration=dataclasses.replace(cal, engine_efficiency=False))
    assert cm.experts_us(spec, floor_only, rows, spec.num_experts, isl=8192) == pytest.approx(want / 1.1)
