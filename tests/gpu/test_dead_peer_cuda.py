"""A DWDP rank killed while serving, on a GPU: two context processes sharing the GPU (plus a generation process), the
fake TensorRT-LLM world of tests/unit/test_trtllm_fake_world.py with the real CUDA transports; rank 1 exits after its
first forward (os._exit, no shutdown), rank 0 runs three more forwards (transport/liveness.py PeerWatch).

- vmm_fd: rank 0's imported allocation handles keep rank 1's physical memory, so its forwards stay bit-exact against
  the single-process reference; the death is said once as a warning.
- ipc (legacy CUDA IPC): nothing keeps an exporter's memory after it exits: rank 0's next forward raises PeerLost at
  once naming dwdp rank 1, and so does every later one; no forward returns an output.
Expert tensors are whole 2 MiB pages (FAKE_H 1024, FAKE_I 2048), as tests/gpu/test_trtllm_adapter_cuda.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_trtllm_fake_world import run_world  # noqa: E402

DIMS = {"FAKE_H": "1024", "FAKE_I": "2048", "FAKE_TOKENS": "64", "FAKE_DIE_AFTER_FORWARD": "1:1"}


def test_vmm_fd_survivor_stays_bit_exact(tmp_path):
    outs, ref = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge", "transport": "vmm_fd",
                                                             "slice_bytes": 2 << 20}, steps=4, env_extra=DIMS,
                          cfg_extra={"shutdown_timeout_s": 10})
    r0, r1 = outs
    assert r1["died_after_forward"] == 1
    assert r0["errors"] == {} and sorted(s for _, s in r0["outs"]) == [0, 1, 2, 3]
    for k, y in r0["outs"].items():
        assert torch.equal(y, ref[k]), k
    warn = [ln for ln in r0["log"] if "exited while serving" in ln]
    assert len(warn) == 1 and "dwdp rank 1 (DWDP group 0" in warn[0] and "vmm_fd keeps the memory" in warn[0], warn


def test_ipc_survivor_fails_fast_naming_the_dead_rank(tmp_path):
    outs, ref = run_world(tmp_path, "lifecycle", "bf16", dwdp={"gemm": "merge", "transport": "ipc",
                                                             "slice_bytes": 2 << 20}, steps=4, env_extra=DIMS,
                          cfg_extra={"shutdown_timeout_s": 10})
    r0 = outs[0]
    assert sorted(s for _, s in r0["outs"]) == [0] and torch.equal(r0["outs"][(0, 0)], ref[(0, 0)])
    assert sorted(r0["errors"]) == [1, 2, 3]
    for e in r0["errors"].values():
        assert e["type"] == "PeerLost" and e["seconds"] < 2.0 and "dwdp rank 1 (DWDP group 0" in e["message"], e
