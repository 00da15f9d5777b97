"""The TensorRT-LLM adapter's runtime path on a GPU: fake TensorRT-LLM modules (tests/fakes, each behaviour
citing upstream), real CUDA transport (vmm_fd / ipc between processes sharing the GPU), CopyScheduler (graph),
composite view or the multi_buffer unit (dwdp::grouped_gemm, CUDA build; with transport auto both take vmm_fd),
bit-exact against the single-process
full-expert reference over three forwards (for multi_buffer: the same unit and op on the full expert set).

Ranks: 2 context processes + 1 generation process on the one GPU (device = rank % device_count, as
trtllm-serve's set_cuda_device). Expert tensors are whole 2 MiB VMM pages (FAKE_H 1024, FAKE_I 2048) so the
composite view can be built; the fake expert kernel is a float32 torch loop standing in for the CUTLASS MoE
(composite_view, merge); multi_buffer replaces run_moe with our unit (integration/trtllm/moe_unit.py), which runs the
CUDA dwdp::grouped_gemm (built on first use, or carried). transport ipc cannot hold a composite view: with gemm
composite_view the ranks fall back to multi_buffer, saying why.
DWDP_TRTLLM_GPU_RESULTS=DIR writes one JSON per case there.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_trtllm_fake_world import run_world  # noqa: E402

DIMS = {"FAKE_H": "1024", "FAKE_I": "2048", "FAKE_TOKENS": "64"}


@pytest.mark.parametrize("era", ["lifecycle", "hooks"])
@pytest.mark.parametrize("quant,gemm,want", [("bf16", "composite_view", "composite_view"),
                                             ("fp8_block_scales", "composite_view", "composite_view"),
                                             ("bf16", "merge", "merge"),
                                             ("bf16", "multi_buffer", "multi_buffer"),
                                             ("fp8_block_scales", "multi_buffer", "multi_buffer"),
                                             ("fp8_block_scales", "composite_view+ipc", "multi_buffer")])
def test_adapter_on_cuda_matches_reference(tmp_path, era, quant, gemm, want):
    dwdp = {"gemm": gemm.split("+")[0], "slice_bytes": 2 << 20}
    if gemm.endswith("+ipc"):
        dwdp["transport"] = "ipc"  # no cuMem allocations: the composite view cannot be built
    outs, ref = run_world(tmp_path, era, quant, dwdp=dwdp, env_extra=DIMS, ref_gemm=want)
    result = {"era": era, "quant": quant, "gemm_requested": gemm, "ranks": []}
    for r, got in enumerate(outs):
        diffs = {f"step{k[1]}": float((y.float() - ref[k].float()).abs().max()) for k, y in got["outs"].items()}
        equal = all(torch.equal(y, ref[k]) for k, y in got["outs"].items())
        result["ranks"].append({"rank": r, "lifecycle": got["lifecycle"], "gemm": got["gemm"], "bit_exact": equal,
                                "gemm_reason": got["gemm_reason"], "unit_calls": got["unit_calls"],
                                "max_abs_diff": diffs})
    out_dir = os.environ.get("DWDP_TRTLLM_GPU_RESULTS")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"adapter_{era}_{quant}_{gemm}.json").write_text(json.dumps(result, indent=2))
    for rr in result["ranks"]:
        assert rr["lifecycle"] == ("upstream" if era == "lifecycle" else "hooks")
        assert rr["gemm"] == want, rr
        if gemm.endswith("+ipc"):
            assert "composite view not possible (composite_view needs transport vmm_fd" in rr["gemm_reason"], rr
        assert rr["unit_calls"] == ([3, 3, 3] if want == "multi_buffer" else []), rr
        if gemm == "multi_buffer" and quant == "fp8_block_scales" and torch.cuda.get_device_capability()[0] == 9:
            # the FP8 default on sm_90 names the measurement it rests on (integration/moe_evidence.py)
            assert "multi_buffer first by measurement" in rr["gemm_reason"], rr
        assert rr["bit_exact"], rr


@pytest.mark.parametrize("quant,gemm,transport", [("bf16", "merge", "vmm_fd"), ("fp8_block_scales", "multi_buffer", "vmm_fd"),
                                                  ("bf16", "merge", "ipc")])
def test_shutdown_frees_the_exported_buffers(tmp_path, quant, gemm, transport):
    """Executor shutdown on both context ranks (processes sharing the GPU) releases the transport after the DWDP
    group's barrier (adapter.close): the device's free memory (cuMemGetInfo through torch.cuda.mem_get_info, measured
    with the context ranks in step, nothing else running on the GPU) grows back by at least the bytes the ranks'
    transports had allocated for their exported buffers (cuMemCreate / cudaMalloc: outside torch's cache, so the
    freed slots, which go back to that cache, do not count). Before, the transport lived until the process exited:
    free memory did not move. gemm merge / multi_buffer: no composite view, whose own VMM ranges close() always
    released."""
    outs, _ = run_world(tmp_path, "lifecycle", quant, dwdp={"gemm": gemm, "transport": transport, "slice_bytes": 2 << 20},
                        env_extra={**DIMS, "FAKE_MEASURE_MEMORY": "1"}, reference=False)
    mem = [got["memory"] for got in outs]
    exported = sum(m["exported_bytes"] for m in mem)
    freed = [m["free_after"] - m["free_before"] for m in mem]
    result = {"quant": quant, "gemm": gemm, "transport": transport, "exported_bytes_all_ranks": exported,
              "device_free_gain_bytes_per_rank_view": freed, "barrier_missing": [got["barrier_missing"] for got in outs],
              "gemm_used": [got["gemm"] for got in outs]}
    out_dir = os.environ.get("DWDP_TRTLLM_GPU_RESULTS")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"shutdown_{quant}_{gemm}_{transport}.json").write_text(json.dumps(result, indent=2))
    assert all(m["kind"] == transport for m in mem), mem
    assert exported >= 2 * 3 * 4 * (4 << 20), result  # 2 ranks x 3 layers x 4 local experts x >= 4 MiB: well above noise
    for got in outs:
        assert got["barrier_missing"] == {} and got["released_at"] is not None, got["log"][-3:]
        assert set(got["expert_numel_after"]) == {0}
    for f in freed:  # what the driver got back once both ranks closed: at least the exported buffers
        assert f >= 0.95 * exported, result
