"""The simulator against `dwdp bench`'s engine on one GPU (the H200 part of docs/SIZING.md's validation): fed the
run's measured iteration times, it reproduces the measured TTFT p50 / p99 within 10% (tests/unit/test_sizing_bench.py
check_replay, here with run.device cuda). Run on the device (scripts/gpu_check.sh)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_sizing_bench import check_replay  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]


@pytest.mark.timeout(600)
def test_simulator_fed_measured_cuda_iterations_reproduces_bench_ttft():
    # a tiny model's iteration on a GPU takes milliseconds: arrivals at 2,000 req/s queue up there
    check_replay("cuda", "bf16", rate=2000.0)
