"""Tokens/s per GPU is one fact computed in one place (perf.imbalance.tokens_per_s_per_gpu): `dwdp plan`'s
tps_per_gpu_* and validate-plan's predicted tps_per_gpu of the same row agree, with imbalance (DEP waits for its slowest
rank every iteration) and with G > 1 (DWDP's dense layers prefetch nothing, so they are not slowed by copies)."""
import pytest

from dwdp_trtllm.commands import validate_plan
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.perf import imbalance
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.planner import plan
from dwdp_trtllm.perf.plan_spec import PlanSpec

R1_8 = get_model("deepseek-r1").truncated(8)


def _row(g: int, cv: float):
    spec = PlanSpec(model=R1_8, gpu=get_gpu("h200"), weight_dtype="fp8", dwdp_sizes=(g,), isls=(8192,), batch=None,
                    mnt=16384, imbalance_cv=cv, samples=64)
    return plan(spec)[0]


@pytest.mark.parametrize("g, cv", [(1, 0.0), (4, 0.0), (4, 0.2), (8, 0.2)])
def test_validate_plan_predicts_the_plans_tokens_per_s_per_gpu(g, cv):
    row = _row(g, cv)
    pred = validate_plan.predicted_metrics(row, R1_8)
    assert pred["dep.tps_per_gpu"] == pytest.approx(row.tps_per_gpu_dep, rel=1e-12)
    assert pred["dwdp.tps_per_gpu"] == pytest.approx(row.tps_per_gpu_dwdp, rel=1e-12)
    assert pred["ratio.tps_per_gpu"] == pytest.approx(row.tps_per_gpu_dwdp / row.tps_per_gpu_dep, rel=1e-12)
    # the engine's time between phases lengthens the iteration: tokens/s x 1 / outside
    slow = validate_plan.predicted_metrics(row, R1_8, outside=1.25)
    assert slow["dwdp.tps_per_gpu"] == pytest.approx(row.tps_per_gpu_dwdp / 1.25, rel=1e-12)


def test_both_commands_call_the_one_function(monkeypatch):
    row = _row(4, 0.2)
    calls = []

    def spy(tokens_per_rank, iteration_us):
        calls.append((tokens_per_rank, iteration_us))
        return -1.0

    monkeypatch.setattr(validate_plan, "tokens_per_s_per_gpu", spy)
    pred = validate_plan.predicted_metrics(row, R1_8)
    assert pred["dep.tps_per_gpu"] == pred["dwdp.tps_per_gpu"] == -1.0 and len(calls) == 2
    from dwdp_trtllm.perf import planner
    monkeypatch.setattr(planner, "tokens_per_s_per_gpu", spy)
    again = _row(4, 0.2)
    assert again.tps_per_gpu_dep == again.tps_per_gpu_dwdp == -1.0
    assert imbalance.tokens_per_s_per_gpu(16384, 200_000.0) == pytest.approx(81920.0)


@pytest.mark.parametrize("g, cv", [(1, 0.0), (4, 0.0), (4, 0.2), (8, 0.2)])
def test_the_predicted_wall_is_the_iteration_tps_per_gpu_divides(g, cv):
    """One iteration time per mode: the phase split's wall (x outside) is the planner's whole iteration, whose tokens/s
    per GPU validate-plan predicts. DEP's ranks wait for the slowest one at the first MoE layer also for the dense
    layers before it (R1: 3 of 8 here); the split counted only the MoE layers' wait: 206 ms wall vs 223 ms behind
    tps_per_gpu at G=8, CV 0.2."""
    row = _row(g, cv)
    for outside in (1.0, 1.25):
        pred = validate_plan.predicted_metrics(row, R1_8, outside=outside)
        for mode in ("dep", "dwdp"):
            wall_us = pred[f"{mode}.iteration_ms.wall"] * 1e3
            # DWDP: ranks free-run, the iteration is tokens over each rank's own rate (imbalance.compare), the split's
            # phases are means: equal within 1e-5 here
            assert wall_us == pytest.approx(getattr(row, f"t_iteration_{mode}_us") * outside, rel=1e-4), mode
            assert pred[f"{mode}.tps_per_gpu"] == pytest.approx(row.tokens_per_rank / wall_us * 1e6, rel=1e-4)
    if cv > 0 and g > 1:  # the wait the slowest rank's dense layers add is in sync_wait, not lost
        assert pred["dep.iteration_ms.sync_wait"] * 1e3 > row.t_sync_us * R1_8.num_moe_layers * outside
