"""The floor under sustained load on CUDA (bench/floor_sustained.py) and the clock sampler (bench/gpu_clocks.py):
the sampler reads this GPU's SM clock and power while kernels run, and the sustained replay of an FP8 DeepSeek-R1
batch (the burst floor's own kernels, CUDA events between pieces) gives every phase a time. Functional checks;
the numbers are `dwdp bench --floor --floor-sustained`'s (scripts/gpu_check.sh floorsust)."""
from __future__ import annotations

import time

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (run on the device: scripts/gpu_check.sh floorsust)", allow_module_level=True)

from dwdp_trtllm.bench.floor import Batch, FloorTimer  # noqa: E402
from dwdp_trtllm.bench.floor_sustained import SustainedSettings, sustained_floor  # noqa: E402
from dwdp_trtllm.bench.gpu_clocks import GpuSampler  # noqa: E402
from dwdp_trtllm.spec.models import get_model  # noqa: E402


def test_sampler_reads_this_gpus_clock_while_kernels_run():
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    with GpuSampler(0) as s:
        t_end = time.perf_counter() + 0.5
        while time.perf_counter() < t_end:
            x @ x
        torch.cuda.synchronize()
    st = s.stats()
    print(f"sampler: {st}")
    assert s.source in ("nvml", "nvidia-smi"), s.source
    assert st["samples"] >= 5 and st["sm_clock_mhz"]["median"] > 0 and st["power_w"]["max"] > 0


def test_sustained_replay_of_an_fp8_r1_batch_times_every_phase():
    spec = get_model("deepseek-r1", num_layers=2, first_k_dense=1)
    t = FloorTimer(spec, torch.bfloat16, "fp8", torch.device("cuda", 0), fp8_linear=True)
    E, T = spec.num_experts, 2048
    rows = tuple(tuple(T * spec.top_k // E for _ in range(E)) for _ in range(spec.num_moe_layers))
    b = Batch(((0, 1024), (512, 1024)), rows)
    burst = t.iteration_ms(b)
    res = sustained_floor(t, [b], 0.2, SustainedSettings(warmup_s=0.5, min_timed=3))
    t.release()
    print(f"burst {burst['total']:.2f} ms, sustained {res['floor_ms']} ({res['passes_timed']} passes, "
          f"{res['warmup_s']:.1f} s warm-up, {res['warmup_end']})")
    f = res["floor_ms"]
    assert all(f[k] > 0 for k in ("attention", "expert_gemm", "other", "total"))
    # the same kernels: within a factor of the burst floor (clocks differ; nothing counted twice or left out)
    assert 0.5 * burst["total"] < f["total"] < 2.0 * burst["total"]
