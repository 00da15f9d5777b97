"""Performance model of DWDP against DEP: hardware specs, roofline cost, contention, imbalance, planner.

Everything here is pure (numpy only, no torch, no CUDA) and runs on a laptop; see docs/PLANNER.md.
"""
from .calibration import Calibration, load_bench_results, load_calibration
from .contention import degree_distribution, expected_slowdown
from .hardware import GPUS, GpuSpec, get_gpu
from .imbalance import Workload, compare, sample_requests
from .planner import plan, predict
from .plan_row import PlanRow
from .plan_spec import PlanSpec
from .recommend import Recommendation, recommend

__all__ = ["Calibration", "load_bench_results", "load_calibration", "degree_distribution", "expected_slowdown",
           "GPUS", "GpuSpec", "get_gpu", "Workload", "compare", "sample_requests", "PlanRow", "PlanSpec",
           "Recommendation", "plan", "predict", "recommend"]
