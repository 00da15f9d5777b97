"""tensorrt_llm/_torch/utils.py: only `ActivationType`, the enum MoE.__init__ takes `activation_type` from
(interface.py @ 581f0712: `from ...utils import ActivationType`, default
`ActivationType.Swiglu`, stored as `self.activation_type = int(activation_type)`).

The Python enum mirrors the CUTLASS MoE enum ("Keep the same order of activation functions in this enum and the
enum in cpp/tensorrt_llm/kernels/cutlass_kernels/include/common.h"); the values are those of that header in
NVIDIA/TensorRT-LLM @ 3585984b32cd: InvalidType = 0, Identity = 1, Gelu = 2, Relu = 3,
Silu = 4, Swiglu = 5, Geglu = 6, SwigluBias = 7, Relu2 = 8. They are version dependent: the same header @ 8b532363ce56
has `Gelu = 0, Relu, Silu, Swiglu, ...` (Swiglu = 3), so dwdp_trtllm reads Swiglu's value from
the installed enum, never a constant. (The Python file itself was read in a fork only, rmeghwal-nv/TensorRT-LLM
@ 521bb4564bfe, with the same values plus SiTu = 9.)
"""
from enum import IntEnum


class ActivationType(IntEnum):
    InvalidType = 0
    Identity = 1
    Gelu = 2
    Relu = 3
    Silu = 4
    Swiglu = 5
    Geglu = 6
    SwigluBias = 7
    Relu2 = 8
