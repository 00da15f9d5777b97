"""dwdp ops: the multi-buffer grouped GEMM (C++/CUDA plugin + torch reference), the VMM composite view and the
merge baseline. Importing this package builds nothing; the op is built on first use (or by `dwdp build-ops`)."""
from .build import OpsBuildError
from .grouped_gemm import available, grouped_gemm, why_unavailable
from .merge import merge_experts
from .reference import dequantize_fp8_blockwise, grouped_gemm_reference, quantize_fp8_blockwise

__all__ = ["OpsBuildError", "available", "grouped_gemm", "why_unavailable", "merge_experts",
           "dequantize_fp8_blockwise", "grouped_gemm_reference", "quantize_fp8_blockwise"]
