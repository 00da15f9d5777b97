"""GPU specs for the planner: datasheet peaks plus default efficiency factors (pure data).

Every *peak* below is a vendor datasheet number (dense, i.e. without 2:4 sparsity; NVIDIA's
datasheets print the sparse figure for tensor cores, so dense = sparse / 2). Every *efficiency*
(fraction of the peak that real kernels reach) is either measured by us on the H200
(/work/shared/DESIGN.md section 5, 2026-12-02), taken from a public report (named), or an explicit
assumption; the comment on each says which. A calibration file (calibration.py) overrides them.

Units: TFLOP/s, TB/s (HBM), GB/s (NVLink, one direction), GB (memory, 1e9 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass

#: matmul dtype names the planner knows; "nvfp4" runs on FP4 tensor cores
MATMUL_DTYPES = ("bf16", "fp8", "nvfp4")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU: datasheet peaks and the fractions of them that kernels reach."""

    name: str
    bf16_tflops: float  # dense BF16 tensor-core peak
    fp8_tflops: float  # dense FP8 tensor-core peak
    fp4_tflops: float | None  # dense FP4 tensor-core peak; None = no FP4 tensor cores (Hopper)
    hbm_tbps: float  # HBM bandwidth
    nvlink_gbps: float  # NVLink bandwidth per direction per GPU
    copy_engines: int | None  # CUDA asyncEngineCount; None = not verified for this GPU
    memory_gb: float  # HBM capacity
    # ---- efficiency factors (fraction of the peak above) ----
    gemm_eff: dict[str, float]  # grouped/dense GEMM, by matmul dtype
    attention_eff: float  # causal SDPA (FlashAttention-class kernel) at the BF16 peak
    hbm_eff: float  # achievable fraction of hbm_tbps
    nvlink_eff: float  # copy-engine peer copy, one direction, fraction of nvlink_gbps
    a2a_eff: float  # MoE dispatch/combine kernels (DeepEP-class), fraction of nvlink_gbps
    a2a_latency_us: float = 20.0  # fixed cost of one layer's dispatch + combine (launch, notify); assumption

    def matmul_tflops(self, dtype: str) -> float:
        """Achievable matmul TFLOP/s for `dtype` (bf16 | fp8 | nvfp4); FP4 falls back to FP8 on Hopper."""
        if dtype not in MATMUL_DTYPES:
            raise ValueError(f"matmul dtype {dtype!r}: expected one of {', '.join(MATMUL_DTYPES)}")
        if dtype == "nvfp4" and self.fp4_tflops is None:
            dtype = "fp8"  # Hopper has no FP4 tensor cores: weights are dequantised to FP8
        peak = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "nvfp4": self.fp4_tflops}[dtype]
        return float(peak) * self.gemm_eff[dtype]

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12 * self.hbm_eff

    @property
    def peer_bytes_per_s(self) -> float:
        return self.nvlink_gbps * 1e9 * self.nvlink_eff

    @property
    def a2a_bytes_per_s(self) -> float:
        return self.nvlink_gbps * 1e9 * self.a2a_eff

    @property
    def attention_flops_per_s(self) -> float:
        return self.bf16_tflops * 1e12 * self.attention_eff


# Hopper efficiencies. MEASURED by us on the H200 (DESIGN.md section 5): torch._grouped_mm BF16 at
# T=16K: 760 TFLOP/s = 0.768 of 989.5; torch._scaled_grouped_mm FP8 rowwise: 1091 TFLOP/s = 0.551 of
# 1979; D2D copy 4.19 TB/s (read+write) = 0.873 of 4.8 TB/s. PUBLIC REPORT: NVLink4 copy-engine P2P on
# HGX H100 371-377 GB/s one way (NVIDIA/nccl#1264) = 0.83 of 450. PUBLIC REPORT: DeepEP intranode
# normal kernels 153/158 GB/s on H800 (deepseek-ai/DeepEP README, legacy) ~0.77 of its 200 GB/s.
# ASSUMPTION: attention at 0.6 of the BF16 peak (FlashAttention-3 class forward; not measured here).
_HOPPER_EFF = dict(gemm_eff={"bf16": 760 / 989.5, "fp8": 1091 / 1979.0, "nvfp4": 1091 / 1979.0},
                   attention_eff=0.6, hbm_eff=4.19 / 4.8, nvlink_eff=375 / 450, a2a_eff=0.77)

# Blackwell efficiencies: NOTHING MEASURED BY US. ASSUMPTION: 0.7 of every tensor-core peak, 0.85 of
# HBM, the Hopper NVLink copy fraction (0.83); PUBLIC REPORT: DeepEP V2 SM100 EP8 726/740 GB/s
# dispatch/combine over NVLink5 (deepseek-ai/DeepEP README) ~0.8 of 900 GB/s.
_BLACKWELL_EFF = dict(gemm_eff={"bf16": 0.7, "fp8": 0.7, "nvfp4": 0.7},
                      attention_eff=0.6, hbm_eff=0.85, nvlink_eff=375 / 450, a2a_eff=0.8)

GPUS: dict[str, GpuSpec] = {
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16 1,979 TFLOPS and FP8 3,958 TFLOPS
    # "with sparsity"; 80 GB HBM3 at 3.35 TB/s; NVLink 900 GB/s (bidirectional -> 450 per direction).
    # asyncEngineCount 3: same Hopper copy-engine complement as the H200 we measured (not measured on H100).
    "h100": GpuSpec(name="h100", bf16_tflops=989.5, fp8_tflops=1979.0, fp4_tflops=None, hbm_tbps=3.35,
                    nvlink_gbps=450.0, copy_engines=3, memory_gb=80.0, **_HOPPER_EFF),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): same tensor-core peaks as H100 SXM;
    # 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s bidirectional. asyncEngineCount 3 MEASURED (DESIGN.md s5).
    "h200": GpuSpec(name="h200", bf16_tflops=989.5, fp8_tflops=1979.0, fp4_tflops=None, hbm_tbps=4.8,
                    nvlink_gbps=450.0, copy_engines=3, memory_gb=141.0, **_HOPPER_EFF),
    # NVIDIA HGX B200 / DGX B200 datasheet, 8 GPUs: FP4 144 PFLOPS, FP8 72 PFLOPS, BF16 36 PFLOPS (all
    # "with sparsity") -> per GPU dense 9,000 / 4,500 / 2,250 TFLOPS; 1.44 TB HBM3e (180 GB per GPU) at
    # 64 TB/s (8 TB/s per GPU); NVLink 5 1.8 TB/s per GPU bidirectional -> 900 GB/s per direction.
    "b200": GpuSpec(name="b200", bf16_tflops=2250.0, fp8_tflops=4500.0, fp4_tflops=9000.0, hbm_tbps=8.0,
                    nvlink_gbps=900.0, copy_engines=None, memory_gb=180.0, **_BLACKWELL_EFF),
    # NVIDIA GB200 NVL72 datasheet, 72 GPUs: FP4 1,440 PFLOPS, FP8/FP6 720 PFLOPS, FP16/BF16 360 PFLOPS
    # (tensor core, "with sparsity") -> per GPU dense 10,000 / 5,000 / 2,500 TFLOPS; up to 13.4 TB HBM3e
    # (186 GB per GPU) at 576 TB/s (8 TB/s per GPU); NVLink 130 TB/s (1.8 TB/s per GPU bidirectional).
    "gb200": GpuSpec(name="gb200", bf16_tflops=2500.0, fp8_tflops=5000.0, fp4_tflops=10000.0, hbm_tbps=8.0,
                     nvlink_gbps=900.0, copy_engines=None, memory_gb=186.0, **_BLACKWELL_EFF),
}


def get_gpu(name: str) -> GpuSpec:
    """A GPU spec by name (h100 | h200 | b200 | gb200)."""
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}: expected one of {', '.join(GPUS)}") from None
