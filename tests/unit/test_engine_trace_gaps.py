"""scripts/trace_gaps.py: GPU idle between kernels of a chrome trace, split into host-late and GPU-side gaps,
charged to the phase (record_function `phase:<name>:<layer>`) whose range holds the launch."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("trace_gaps", ROOT / "scripts" / "trace_gaps.py")
trace_gaps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trace_gaps)


def _x(cat, name, ts, dur, corr=None):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if corr is not None:
        e["args"] = {"correlation": corr}
    return e


def test_gaps_split_into_host_late_and_gpu_side_and_charged_to_the_launching_phase():
    ev = [
        _x("user_annotation", "phase:attention:0", 0, 100),
        _x("user_annotation", "phase:other:0", 100, 100),
        _x("python_function", "dwdp_trtllm/engine/layers.py(10): __call__", 0, 100),
        _x("python_function", "dwdp_trtllm/engine/fp8_linear.py(5): linear", 40, 20),
        # kernel 1 launched at 1, runs 10-30; kernel 2 launched at 5 (in time), starts at 32 (2 us GPU side);
        # kernel 3 launched at 52 (GPU idle since 50): starts 60, runs to 80 -> 10 us host late, in fp8_linear
        _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 1), _x("kernel", "k1", 10, 20, 1),
        _x("cuda_runtime", "cudaLaunchKernel", 5, 1, 2), _x("kernel", "k2", 32, 18, 2),
        _x("cuda_runtime", "cuLaunchKernelEx", 52, 2, 3), _x("kernel", "k3", 60, 20, 3),
        # launched in the other phase at 120, after the GPU went idle at 80: 50 us host late
        _x("cuda_runtime", "cudaLaunchKernel", 120, 1, 4), _x("kernel", "k4", 130, 10, 4),
        _x("cpu_op", "aten::mm", 0, 500),  # not a GPU activity
    ]
    rep = trace_gaps.gap_report({"traceEvents": ev}, min_gap_us=1.0)
    assert rep["busy_ms"] == pytest.approx((20 + 18 + 20 + 10) / 1e3)
    assert rep["span_ms"] == pytest.approx(130 / 1e3)
    assert rep["idle_ms"] == pytest.approx((2 + 10 + 50) / 1e3)
    assert rep["host_late_ms"] == pytest.approx(60 / 1e3) and rep["gpu_side_ms"] == pytest.approx(2 / 1e3)
    att, oth = rep["per_phase"]["attention"], rep["per_phase"]["other"]
    assert att["idle_ms"] == pytest.approx(12 / 1e3) and att["host_late_ms"] == pytest.approx(10 / 1e3)
    assert oth["idle_ms"] == pytest.approx(50 / 1e3) and oth["busy_ms"] == pytest.approx(10 / 1e3)
    big, mid, small = rep["gaps"]
    assert (big["us"], big["phase"], big["next"], big["host_late"]) == (50, "other", "k4", True)
    assert (mid["us"], mid["phase"], mid["launch"]) == (10, "attention", "cuLaunchKernelEx")
    assert mid["frame"] == "engine/fp8_linear.py(5): linear < engine/layers.py(10): __call__"
    assert (small["us"], small["host_late"], small["prev"], small["next"]) == (2, False, "k1", "k2")
    assert "idle 0.1 ms" in trace_gaps.format_report(rep, "t")


def test_no_gpu_activity_reports_zeros():
    rep = trace_gaps.gap_report({"traceEvents": [_x("cpu_op", "aten::add", 0, 5)]})
    assert rep["span_ms"] == rep["idle_ms"] == 0.0 and rep["gaps"] == []
