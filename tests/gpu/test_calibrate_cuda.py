"""`dwdp calibrate` on the device: the one-GPU run (peer inputs priors) and, on 2+ GPUs, the peer measurements through
the real CopyScheduler (bit-exact pulls). The numbers are the node's; only their presence, units and consistency are
checked here."""
from __future__ import annotations

import json

import pytest
import torch

from dwdp_trtllm.cli import main
from dwdp_trtllm.perf.calibration import load_calibration

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]


def test_one_gpu_quick_calibration_measures_the_kernels_and_keeps_peer_priors(tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--quick", "--gpus", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    cal = load_calibration(out)
    assert data["measured_on"]["purpose"] == "calibration" and data["measured_on"]["gpu_name"] == torch.cuda.get_device_name(0)
    for k in ("grouped_gemm_tflops", "attention_us_by_isl", "floor_tflops", "hbm_tbps"):
        assert cal.measured(k), k
    assert cal.peer_copy_gbps is None and "one GPU" in data["provenance"]["peer_copy_gbps"]["why"]
    assert 0.1 < cal.hbm_tbps < 20 and all(0 < t < 5000 for _, t in cal.grouped_gemm_tflops["fp8"])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2+ GPUs of one host (peer copies)")
def test_peer_pulls_are_timed_exactly_and_summarised():
    from dwdp_trtllm.calibrate import peer
    from dwdp_trtllm.calibrate.copy_timer import SchedulerCopyTimer

    timer = SchedulerCopyTimer("cuda", min(torch.cuda.device_count(), 8), reps=3)
    pairs = peer.pair_bandwidth(timer, 256 << 20)  # every pull checked bit-exact inside the timer
    slices = peer.slice_sweep(timer, 256 << 20, (0, 2 << 20))
    assert len(pairs) == timer.ranks * (timer.ranks - 1) and all(10 < p["gbps"] < 2000 for p in pairs)
    keys = peer.summary_keys(pairs, slices, [])
    assert 0 < keys["slice_efficiency"][0][1] < 1.5
