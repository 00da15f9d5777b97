"""The clock sampler (bench/gpu_clocks.py; scripts/profile_engine.py and `dwdp bench --floor`) samples the GPU the run
uses: gpu_index_of maps torch's cuda:N to NVML's / nvidia-smi's GPU (by UUID), through CUDA_VISIBLE_DEVICES where
torch gives no UUID (was: always nvidia-smi -i 0)."""
from __future__ import annotations

from dwdp_trtllm.bench.gpu_clocks import gpu_index_of


def smi_gpu_id(cuda_index, uuids, visible, torch_uuid=None):
    """The UUID of the GPU gpu_index_of names, None where it cannot be told."""
    i = gpu_index_of(cuda_index, uuids, visible, torch_uuid)
    return None if i is None else uuids[i]


UUIDS = ["GPU-aaaa0000-0000", "GPU-bbbb1111-1111", "GPU-cccc2222-2222", "GPU-dddd3333-3333"]


def test_unset_visible_devices_maps_index_to_the_same_gpu():
    assert [smi_gpu_id(i, UUIDS, None) for i in range(4)] == UUIDS


def test_visible_devices_by_index_shift_the_gpu():
    assert smi_gpu_id(0, UUIDS, "2,3") == UUIDS[2]
    assert smi_gpu_id(1, UUIDS, "3,1") == UUIDS[1]
    assert smi_gpu_id(2, UUIDS, "2,3") is None  # cuda:2 does not exist under "2,3"


def test_visible_devices_by_uuid_prefix():
    assert smi_gpu_id(0, UUIDS, "GPU-cccc") == UUIDS[2]
    assert smi_gpu_id(1, UUIDS, "GPU-dddd,GPU-aaaa") == UUIDS[0]


def test_torch_uuid_wins_over_the_index_mapping():
    # CUDA's order can differ from nvidia-smi's (CUDA_DEVICE_ORDER): the UUID names the device whatever the order
    assert smi_gpu_id(0, UUIDS, None, torch_uuid="dddd3333-3333") == UUIDS[3]
    assert smi_gpu_id(0, UUIDS, "1", torch_uuid="GPU-cccc2222-2222") == UUIDS[2]
    # a UUID nvidia-smi does not list: fall back to CUDA_VISIBLE_DEVICES
    assert smi_gpu_id(0, UUIDS, "1", torch_uuid="eeee") == UUIDS[1]


def test_mig_or_ambiguous_visible_devices_give_no_gpu():
    assert smi_gpu_id(0, UUIDS, "MIG-1234") is None
    assert smi_gpu_id(0, UUIDS, "1,1") is None


def test_profile_engine_floor_clock_is_cut_to_the_timed_windows():
    """scripts/profile_engine.py prints the floor's clock from the samples inside FloorTimer.windows only, as
    `dwdp bench --floor` does (the host work between timings is not the clock the kernels ran at)."""
    import importlib.util
    import sys
    from pathlib import Path

    import torch
    path = Path(__file__).resolve().parents[2] / "scripts" / "profile_engine.py"
    spec = importlib.util.spec_from_file_location("profile_engine_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
    clocks = mod.GpuClocks(torch.device("cuda", 0))
    clocks.samples, clocks.source = [(0.5, 1980.0, 200.0), (1.5, 1500.0, 650.0), (2.5, 1980.0, 200.0)], "fake"
    text = clocks.summary([(1.0, 2.0)])
    assert "SM clock median 1500 MHz" in text and "1 samples inside 1 timed windows (of 3 in the block)" in text
    assert "SM clock median 1980 MHz" in clocks.summary()  # the whole block, without windows
