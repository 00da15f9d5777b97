"""Planner: the paper's section-3 shape, imbalance, memory and recommendations."""
import dataclasses

import pytest

from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.perf.calibration import Calibration
from dwdp_trtllm.perf.hardware import get_gpu
from dwdp_trtllm.perf.planner import check_candidates, plan
from dwdp_trtllm.perf.plan_spec import PlanSpec
from dwdp_trtllm.perf.recommend import recommend
from dwdp_trtllm.spec.schema import ConfigError

R1 = get_model("deepseek-r1")


def _spec(**kw):
    base = dict(model=R1, gpu=get_gpu("gb200"), weight_dtype="nvfp4", dwdp_sizes=(4,), isls=(1024, 8192, 16384, 32768))
    return PlanSpec(**{**base, **kw})


def test_gb200_nvfp4_crossover_shape_and_paper_ratios():
    rows = plan(_spec(interference=1.15))
    s = [r.speedup for r in rows]
    assert s[0] < 1 and s[1] < 1 < s[2] and s[3] > 1 and s[3] < s[2]
    # the paper's roofline (section 3): T_compute/T_prefetch 0.19, 0.62, 1.52, 4.77 -- same order and trend
    ratios = [r.compute_over_prefetch for r in rows]
    assert ratios == sorted(ratios) and 0.1 < ratios[0] < 0.3 and 0.4 < ratios[1] < 1 < ratios[2] < 2.5
    for r in rows:
        assert r.speedup == pytest.approx(r.t_dep_us / r.t_dwdp_us)
        assert r.prefetch_hidden == (r.t_compute_us * 1.15 >= r.t_prefetch_us)
        assert r.t_dep_us == pytest.approx(r.t_compute_dep_us + r.t_all2all_us, rel=1e-9)  # balanced: no sync
    rec = recommend(_spec(interference=1.15), rows)
    assert rec.use_dwdp and rec.verdict == "DWDP" and rec.dwdp_size == 4 and "at ISL 16384, 32768" in rec.reason
    # ISL 8192: nominal 0.82, but GB200's assumed efficiencies range it past 1 (perf/uncertainty.py EFF_RANGE)
    assert any("ISL 1024 DEP" in n and "ISL 8192 marginal" in n for n in rec.notes)
    # with the paper's per-phase interference priors, the paper's own roofline (T_DEP/T_DWDP 0.10, 0.73, 1.27, 1.17
    # at ISL 1K/8K/16K/32K, blog 19 / arXiv 2604.01621 figure 3) lies inside every predicted range
    for r, paper in zip(plan(_spec()), (0.10, 0.73, 1.27, 1.17)):
        assert r.speedup_low <= paper <= r.speedup_high + 0.005, (r.isl, r.speedup_low, r.speedup_high)


def test_imbalance_helps_dwdp():
    kw = dict(isls=(8192,), batch=None, mnt=32768, isl_dist="uniform_ratio", samples=128)
    bal = plan(_spec(**kw))[0]
    imb = plan(_spec(imbalance_cv=0.2, **kw))[0]
    assert imb.t_sync_us > bal.t_sync_us >= 0 and imb.sync_overhead > 0.02
    assert imb.speedup > bal.speedup


def test_bigger_batch_moves_the_crossover_down():
    one = plan(_spec(isls=(8192,)))[0]
    four = plan(_spec(isls=(8192,), batch=4))[0]
    assert one.speedup < 1 < four.speedup


def test_redundancy_shrinks_prefetch_and_grows_memory():
    a, b = plan(_spec(isls=(8192,), redundant_experts=(0, 32)))
    assert b.t_prefetch_us < a.t_prefetch_us and b.memory_per_rank_gb > a.memory_per_rank_gb
    assert b.fetch_gb == pytest.approx(a.fetch_gb * (192 - 32) / 192)


def test_unsliced_copies_pay_contention():
    sl, un = plan(_spec(isls=(16384,), slice_bytes=(2 << 20, 0)))
    # G=4 unsliced: 1 + (E[C] - 1) / 2 = 4/3 over bytes / bandwidth (perf/contention.py), sliced 1.006
    assert un.t_prefetch_us > 1.3 * sl.t_prefetch_us and un.speedup < sl.speedup


def test_memory_does_not_fit_means_dep():
    spec = _spec(gpu_memory_gb=60.0)
    rows = plan(spec)
    assert not any(r.fits for r in rows) and all(r.memory_dep_gb > 60 for r in rows)
    rec = recommend(spec, rows)  # DEP does not fit either: no "use DEP", the GPU count per mode instead
    assert not rec.use_dwdp and "nothing fits 4 GPUs" in rec.reason and "use DEP" not in rec.reason
    assert f"DEP {rows[0].smallest_fitting_dep_size}" in rec.reason and rows[0].smallest_fitting_dep_size > 4
    row = rows[0]
    budget = (row.memory_dep_gb + row.memory_per_rank_gb) / 2  # DEP fits, DWDP (prefetch slots) does not
    spec = _spec(gpu_memory_gb=budget)
    rec = recommend(spec, plan(spec))
    assert not rec.use_dwdp and rec.reason.startswith("use DEP here: memory does not fit")


def test_prefetch_exposed_everywhere_means_dep_with_reason():
    spec = _spec(isls=(1024, 2048), dwdp_sizes=(2, 4))
    rec = recommend(spec, plan(spec))
    assert not rec.use_dwdp and rec.verdict == "DEP" and "prefetch exposed at ISL 1024, 2048" in rec.reason


def test_calibration_changes_the_prediction():
    slow = _spec(isls=(16384,), calibration=Calibration(peer_copy_gbps=100.0, interference=1.3))
    base = plan(_spec(isls=(16384,)))[0]
    r = plan(slow)[0]
    assert r.t_prefetch_us == pytest.approx(base.t_prefetch_us * (750 / 100))  # GB200: 900 GB/s x 0.833
    assert r.speedup < base.speedup


def test_g1_is_plain_data_parallel():
    r = plan(_spec(isls=(8192,), dwdp_sizes=(1,), model=get_model("qwen3-30b-a3b")))[0]
    assert r.t_prefetch_us == 0 and r.t_all2all_us == 0 and r.speedup == pytest.approx(1.0)


def test_candidates_checked_with_argument_names():
    with pytest.raises(ConfigError, match="--dwdp-size"):
        check_candidates(_spec(dwdp_sizes=(300,)))
    with pytest.raises(ConfigError, match="--redundant-experts"):
        check_candidates(_spec(redundant_experts=(250,)))


def test_gqa_model_and_h200_rows_are_finite():
    spec = dataclasses.replace(_spec(), model=get_model("mixtral-8x7b"), gpu=get_gpu("h200"), weight_dtype="bf16",
                               dwdp_sizes=(2, 4))
    for r in plan(spec):
        assert 0 < r.t_dwdp_us < 1e8 and 0 < r.speedup < 10


def test_plan_memory_is_the_deployment_fit_of_gen_config():
    """`dwdp plan` prices memory with memory.fit_deployment (what `dwdp gen-config` refuses on): DeepSeek-R1 FP8 at
    DWDP4 on an H200 does not fit (166.3 GB of experts alone, the MTP layer's included), the reason names the parts and the smallest
    dwdp_size that fits; DWDP8 fits."""
    from dwdp_trtllm.spec.config import DwdpConfig
    from dwdp_trtllm.deploy.memory import fit_deployment
    spec = _spec(gpu=get_gpu("h200"), weight_dtype="fp8", dwdp_sizes=(4,), isls=(8192,), mnt=16384, batch=None)
    (row,) = plan(spec)
    want = fit_deployment(R1, DwdpConfig(dwdp_size=4), int(141e9), weight_dtype="fp8", max_num_tokens=16384)
    assert row.memory_per_rank_gb == pytest.approx(want.total / 1e9) and not row.fits
    assert row.memory_parts_gb["routed experts held"] == pytest.approx(R1.expert_bytes("fp8") * 64 * (R1.num_moe_layers + R1.mtp_layers) / 1e9, rel=1e-3)
    assert set(row.memory_parts_gb) == set(row.memory_dep_parts_gb) == {
        "routed experts held", "prefetch slots", "all-to-all buffers", "dense weights", "activations", "KV-cache floor"}
    assert sum(row.memory_parts_gb.values()) == pytest.approx(row.memory_per_rank_gb, abs=1e-2)  # the parts make the total
    assert row.smallest_fitting_dwdp_size == want.smallest_fitting_dwdp_size and 4 < want.smallest_fitting_dwdp_size <= 8
    # DEP holds the same 64 experts per layer, all-to-all buffers and no prefetch slots (memory.rank_memory)
    assert row.memory_dep_gb == pytest.approx(want.dep.total / 1e9) and row.memory_dep_parts_gb["prefetch slots"] == 0
    assert row.memory_per_rank_gb - row.memory_dep_gb == pytest.approx(
        row.memory_parts_gb["prefetch slots"] - row.memory_dep_parts_gb["all-to-all buffers"], abs=1e-3)
    rec = recommend(spec, [row])  # DEP4 does not fit either: nothing fits, the count per mode named
    assert not rec.use_dwdp and "nothing fits 4 GPUs" in rec.reason and "routed experts held 166.3" in rec.reason
    assert want.smallest_line() in rec.reason  # memory's line, word for word
    (row8,) = plan(dataclasses.replace(spec, dwdp_sizes=(8,)))
    assert row8.fits and row8.smallest_fitting_dwdp_size == want.smallest_fitting_dwdp_size
