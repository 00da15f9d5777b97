"""A CUDA graph captured around a DWDP layer is refused by name (HopperDwdpManager raises DwdpCaptureError when
torch.cuda.is_current_stream_capturing()): TensorRT-LLM captures decode graphs by default (cuda_graph_config), and a
captured DWDP layer would bake in its slot choice, wait on copy events recorded outside the graph and capture its
prefetch copies instead of running them. The fake disaggregated world on the GPU (tests/fakes, as
test_trtllm_adapter_cuda.py): after the first forward each context rank captures a graph around its first MoE block;
the capture must fail with our error, and the rank's later forwards stay bit-exact against the full-expert reference
(the refused capture changed no slot and bound nothing). Not run on the CPU machine (no CUDA)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_trtllm_fake_world import run_world  # noqa: E402

DIMS = {"FAKE_H": "1024", "FAKE_I": "2048", "FAKE_TOKENS": "64"}


@pytest.mark.parametrize("era,gemm", [("lifecycle", "multi_buffer"), ("hooks", "composite_view")])
def test_capture_around_a_dwdp_layer_is_refused_by_name(tmp_path, era, gemm):
    outs, ref = run_world(tmp_path, era, "bf16", dwdp={"gemm": gemm, "slice_bytes": 2 << 20},
                          env_extra={**DIMS, "FAKE_CAPTURE": "1"}, ref_gemm=gemm)
    for r, got in enumerate(outs):
        refused = got["capture_refused"] or ""
        assert "DwdpCaptureError" in refused and "cannot run inside a captured graph" in refused, (r, refused)
        assert "cuda_graph_config: null" in refused
        for key, y in got["outs"].items():
            assert torch.equal(y, ref[key]), f"rank {r} step {key[1]}: max diff {(y - ref[key]).abs().max()}"
