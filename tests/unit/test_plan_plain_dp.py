"""G=1 (plain data parallel, every expert on every rank) is a planner candidate wherever it fits, and wins ties
(issue 34 item 6): a Qwen3-30B-style model on an H200 gets G=1, not DWDP G=2 at 1.00x; memory.default_dwdp_size,
which every deployment command defaults to, says 1 there too."""
from __future__ import annotations

from dwdp_trtllm.cli import build_parser
from dwdp_trtllm.commands.plan import build_spec
from dwdp_trtllm.deploy.memory import default_dwdp_size, smallest_fitting
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.perf.planner import plan
from dwdp_trtllm.perf.recommend import recommend


def _rec(*argv):
    spec = build_spec(build_parser().parse_args(["plan", *argv]))
    return spec, recommend(spec, plan(spec))


def test_plain_dp_wins_the_tie_with_dwdp2():
    spec, rec = _rec("--model", "qwen3-30b-a3b", "--dwdp-size", "1,2", "--isl", "8192")
    assert rec.dwdp_size == 1 and rec.verdict == "DP" and not rec.use_dwdp
    assert "plain data parallel (G=1)" in rec.reason and "DWDP2" in rec.reason


def test_dwdp_kept_where_g1_does_not_fit():
    # DeepSeek-R1 FP8 (654 GB of routed experts) cannot hold every expert on one H200: G=1 is no candidate there
    spec, rec = _rec("--model", "deepseek-r1", "--dwdp-size", "1,8", "--isl", "8192", "--mnt", "16384")
    assert rec.dwdp_size == 8 and rec.verdict != "DP"


def test_default_dwdp_size_is_one_where_every_expert_fits():
    q = PRESETS["qwen3-30b-a3b"]
    h200 = 141 * 10 ** 9
    assert smallest_fitting(q, "dwdp", h200, weight_dtype="fp8", max_num_tokens=16384) == 1
    assert default_dwdp_size(q, h200, weight_dtype="fp8", max_num_tokens=16384) == 1
    # where G=1 does not fit, still the smallest fitting power of two
    r1 = PRESETS["deepseek-r1"]
    assert default_dwdp_size(r1, h200, weight_dtype="fp8", max_num_tokens=16384) == 8


def test_plan_auto_plans_g1_for_a_small_model():
    spec, rec = _rec("--model", "qwen3-30b-a3b", "--isl", "8192")
    assert spec.dwdp_sizes == (1,) and rec.verdict == "DP"
