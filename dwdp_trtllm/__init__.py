"""dwdp_trtllm: Distributed Weight Data Parallelism for the context phase of MoE LLM inference."""
from .spec.config import BenchConfig, DwdpConfig
from .spec.models import ModelSpec, get_model
from .core.placement import ExpertPlacement, make_placement

__version__ = "0.1.0"
__all__ = ["BenchConfig", "DwdpConfig", "ExpertPlacement", "ModelSpec", "get_model", "make_placement"]
