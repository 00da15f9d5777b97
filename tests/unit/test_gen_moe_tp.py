"""Generation servers with MoE tensor parallelism and attention TP (`dwdp size --gen-moe-tp / --gen-attn-tp`):
priced from aiconfigurator's rows for those shapes (a hand composition of the raw JSON here), searched, reported,
and written by gen-config as TensorRT-LLM reads them."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from dwdp_trtllm.cli import build_parser, main
from dwdp_trtllm.commands import size as size_cmd
from dwdp_trtllm.perf.kernel_tables import package_table_path
from dwdp_trtllm.sizing import report
from dwdp_trtllm.sizing import traffic as tr
from dwdp_trtllm.sizing.decode_cost import decode_cost, package_path, stated_pricing
from dwdp_trtllm.sizing.simulator import Deployment, simulate
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.spec.schema import ConfigError

R1 = PRESETS["deepseek-r1"]


def _curve(points, x: float) -> float:
    """The tables' rule, written out: linear inside, constant rate past the last row."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return ys[-1] * x / xs[-1] if x > xs[-1] else float(np.interp(x, xs, ys))


def _row(rows, b: int, kv: int) -> float:
    """A module row at a measured (batch, KV length): no interpolation."""
    (v,) = [ms for bb, kk, ms in rows if bb == b and kk == kv]
    return v


def _raw():
    gen = json.loads(package_path("h200").read_text())
    ctx = json.loads(package_table_path("h200").read_text())
    return gen, gen["models"]["deepseek-v3"], ctx["models"]["deepseek-v3"]


@pytest.mark.parametrize("routing", ["balanced", "power_law_1.01"])
def test_attention_dp_with_moe_tp_equals_a_hand_composition_of_the_rows(routing):
    """gen8 etp2ep4 at 8 requests per rank, KV 8192 (aiconfigurator's 16-GPU decode server at ISL 8K): per MoE layer
    the 128-head module row + the MoE TP2 x EP4 row at 64 tokens (every rank's) + shared experts and router at 8 +
    NCCL all-gather + reduce-scatter of 64 x hidden elements over 8 GPUs; 3 dense layers (module + dense MLP); the LM
    head. Every number read from the shipped JSON, not through decode_cost."""
    gen, g, c = _raw()
    b, kv, tp = 8, 8192, 8
    module = _row(g["mla_generation_module"]["fp8_block/fp8"]["rows"], b, kv)
    moe = _curve(g["moe_tp"]["fp8"]["by_shape"]["2x4"][routing], b * tp)
    fp8 = c["gemm"]["fp8_block"]["ops"]
    shared = _curve(fp8["shared_fc1"]["points"], b) + _curve(fp8["shared_fc2"]["points"], b)
    router = _curve(c["gemm"]["bfloat16"]["ops"]["router"]["points"], b)
    nccl = json.loads(package_table_path("h200").read_text())["comm"]["nccl"]
    el = b * tp * R1.hidden_size
    comm = _curve(nccl["all_gather"]["8"], el) + _curve(nccl["reduce_scatter"]["8"], el)
    dense = module + _curve(fp8["dense_fc1"]["points"], b) + _curve(fp8["dense_fc2"]["points"], b)
    head = _curve(g["gemm"]["lm_head"]["points"], b)
    want = R1.num_moe_layers * (module + moe + shared + router + comm) + R1.first_k_dense * dense + head
    dc = decode_cost(R1, "h200", "fp8", routing=routing)
    assert dc.step_ms(tp, b, kv, attn_tp=1, moe_tp=2) == pytest.approx(want, rel=1e-6)


def test_attention_tp_with_moe_tp_equals_a_hand_composition_of_the_rows():
    """gen8 tp8 etp2ep4 at 64 requests in its one attention group, KV 4096 (aiconfigurator's 16-GPU decode server at
    ISL 4K): the 16-head module row (128 heads over 8 GPUs), the MoE TP2 x EP4 row at the group's 64 tokens, the
    shared experts' and dense MLP's GEMMs split over 8 GPUs, two custom all-reduces of 64 x hidden per layer, the LM
    head split over 8."""
    gen, g, c = _raw()
    b, kv, tp = 64, 4096, 8
    routing = "power_law_1.01"
    module = _row(g["mla_generation_module_by_heads"]["16"]["fp8_block/fp8"]["rows"], b, kv)
    moe = _curve(g["moe_tp"]["fp8"]["by_shape"]["2x4"][routing], b)
    split = g["gemm"]
    shared = _curve(split["shared_fc1/tp8"]["points"], b) + _curve(split["shared_fc2/tp8"]["points"], b)
    assert (split["shared_fc1/tp8"]["n"], split["shared_fc2/tp8"]["k"]) == (2 * 2048 // 8, 2048 // 8)
    router = _curve(c["gemm"]["bfloat16"]["ops"]["router"]["points"], b)
    ar = 2 * _curve(gen["comm"]["custom_allreduce"]["by_gpus"]["8"], b * R1.hidden_size)
    dense = module + _curve(split["dense_fc1/tp8"]["points"], b) + _curve(split["dense_fc2/tp8"]["points"], b) + ar
    head = _curve(split["lm_head/tp8"]["points"], b)
    want = R1.num_moe_layers * (module + moe + shared + router + ar) + R1.first_k_dense * dense + head
    dc = decode_cost(R1, "h200", "fp8", routing=routing)
    assert dc.step_ms(tp, b, kv, attn_tp=8, moe_tp=2) == pytest.approx(want, rel=1e-6)


def test_the_decode_step_follows_the_stated_routing_and_dep_comm():
    """`--routing-skew power_law_1.01` prices the decode experts at their power-law rows (as the context side),
    `--dep-comm allgather_reducescatter` the DEP step's communication at the NCCL rows; unstated: balanced, DeepEP."""
    spec, _ = size_cmd.problems(build_parser().parse_args(["size", "--rate", "1", "--duration", "30"]))
    assert stated_pricing(spec) == {"routing": "balanced", "dep_comm": None}
    spec, _ = size_cmd.problems(build_parser().parse_args(
        ["size", "--rate", "1", "--duration", "30", "--routing-skew", "power_law_1.01",
         "--dep-comm", "allgather_reducescatter"]))
    assert stated_pricing(spec) == {"routing": "power_law_1.01", "dep_comm": "allgather_reducescatter"}
    dc0 = decode_cost(R1, "h200", "fp8")
    dc1 = decode_cost(R1, "h200", "fp8", **stated_pricing(spec))
    _, _, c = _raw()
    ep8 = c["moe"]["fp8"]["ep"]["8"]
    nccl = json.loads(package_table_path("h200").read_text())["comm"]["nccl"]
    el = 6 * 8 * R1.hidden_size
    # one MoE layer's difference is exactly the two rows' differences (module, shared, router unchanged)
    d_moe = _curve(ep8["power_law_1.01"], 48) - _curve(ep8["balanced"], 48)
    d_comm = (_curve(nccl["all_gather"]["8"], el) + _curve(nccl["reduce_scatter"]["8"], el)) - dc0.comm_ms(8, 6)[0]
    assert dc1.moe_layer_ms(8, 6, 8704) - dc0.moe_layer_ms(8, 6, 8704) == pytest.approx(d_moe + d_comm, rel=1e-6)
    assert "DeepEP" in dc0.comm_ms(8, 6)[1] and "NCCL" in dc1.comm_ms(8, 6)[1]


def test_shapes_the_tables_cannot_price_are_refused_naming_the_flag(capsys):
    dc = decode_cost(R1, "h200", "fp8")
    assert dc.shape_why(8, 1, 3)[0] == "--gen-moe-tp"
    assert dc.shape_why(8, 4, 1)[0] == "--gen-attn-tp"  # attention TP inside a server: not priced
    assert dc.shape_why(16, 1, 2)[0] == "--gen-moe-tp"  # no NCCL rows over 16 GPUs
    assert dc.shape_why(8, 8, 2) is None and dc.shape_why(8, 1, 2) is None and dc.shape_why(8, 1, 1) is None
    for flag, val in (("--gen-moe-tp", "3"), ("--gen-attn-tp", "4")):
        rc = main(["size", "--rate", "1", "--duration", "30", "--gen-tp", "8", flag, val])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and flag in err[0], err


def test_an_attention_tp_server_holds_its_batch_in_one_group():
    """gen8 with attention TP 8 and batch 4: one attention group, so at most 4 requests decode at once and the step
    is priced at the group's batch; attention DP (the default) holds 8 x 4."""
    n = 12
    a = tr.Arrivals(np.zeros(n), np.full(n, 100), np.full(n, 21), "burst")
    for attn, cap in ((8, 4), (1, 32)):
        seen = []
        d = Deployment("dep", 8, 1, 4096, 8, 1, 4, gen_attn_tp=attn, gen_moe_tp=2)
        simulate(a, d, lambda s, segs: 0.01, lambda tp, b, kv: seen.append(b) or 0.01, lambda isl: 0.0)
        assert max(seen) * d.gen_groups == pytest.approx(min(n, cap))


def test_the_report_names_the_generation_shape_in_18_columns():
    for attn, moe, want in ((1, 1, "1 x 8, batch 16"), (1, 2, "1x8 etp2ep4 b16"), (8, 2, "1x8 tp8/etp2 b16")):
        d = Deployment("tp", 8, 1, 8192, 8, 1, 16, gen_attn_tp=attn, gen_moe_tp=moe)
        assert report.gen_cell(d) == want and len(want) <= report.W_COL
    assert Deployment("tp", 8, 1, 8192, 8, 1, 6, gen_moe_tp=2).gen_shape() == "etp2ep4"
    assert Deployment("tp", 8, 1, 8192, 8, 1, 6, gen_attn_tp=8, gen_moe_tp=2).gen_shape() == "tp8 etp2ep4"


def test_gen_config_writes_moe_tp_and_attention_tp_as_trtllm_reads_them(tmp_path, capsys):
    """TensorRT-LLM's fields (tensorrt_llm/llmapi/llm_args.py @ fcd3f31682808ae5, BaseLlmArgs:
    moe_tensor_parallel_size and moe_expert_parallel_size, Optional[int] = None; enable_attention_dp, bool = False;
    validate_parallel_config hands them to _ParallelConfig as moe_tp_size / moe_ep_size / enable_attention_dp):
    TP x EP = tensor_parallel_size."""
    base = ["gen-config", "--mode", "disaggregated", "--model", "m", "--preset", "deepseek-r1", "--dwdp-size", "8",
            "--gen-tp", "8", "--gen-batch", "56", "--mtp", "0"]
    for extra, want in ((["--gen-moe-tp", "2", "--gen-attn-tp", "8"],
                         {"moe_tensor_parallel_size": 2, "moe_expert_parallel_size": 4, "enable_attention_dp": False}),
                        (["--gen-moe-tp", "2"],
                         {"moe_tensor_parallel_size": 2, "moe_expert_parallel_size": 4, "enable_attention_dp": True}),
                        ([], {"moe_expert_parallel_size": 8, "enable_attention_dp": True})):
        out = tmp_path / ("x" + "".join(extra))
        assert main(base + extra + ["--out", str(out)]) == 0
        capsys.readouterr()
        gen = yaml.safe_load((out / "disagg_worker.yaml").read_text())["generation_servers"]
        assert gen["tensor_parallel_size"] == 8 and gen["max_batch_size"] == 56
        assert {k: gen.get(k) for k in ("moe_tensor_parallel_size", *want)} == {"moe_tensor_parallel_size": None,
                                                                               **want}
        # check-config prices the generation rank's experts at 1/(TP x EP) of them: DEP8's share, not EP4's
        main(["check-config", str(out / "disagg_worker.yaml")])
        assert "priced as one rank of DEP8 (experts over 8 GPUs)" in capsys.readouterr().out
    for flag, val in (("--gen-moe-tp", "3"), ("--gen-attn-tp", "4")):
        assert main(base + [flag, val, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], err


def test_size_out_passes_the_generation_shape_to_gen_config():
    args = build_parser().parse_args(["size", "--rate", "1"])
    d = Deployment("dwdp", 8, 8, 8192, 8, 1, 6, gen_moe_tp=2)
    argv = size_cmd.gen_config_argv(args, d)
    assert argv[argv.index("--gen-moe-tp") + 1] == "2" and argv[argv.index("--gen-attn-tp") + 1] == "1"
    assert "--gen-moe-tp" not in size_cmd.gen_config_argv(args, Deployment("dwdp", 8, 8, 8192, 8, 1, 6))


AICQ_16 = ["--rate", "1.464", "--isl", "8192", "--isl-dist", "fixed", "--osl", "1024", "--osl-dist", "fixed",
           "--ttft-p50", "2", "--tps-user", "33.33", "--gpu-budget", "16", "--routing-skew", "power_law_1.01",
           "--dep-comm", "allgather_reducescatter", "--mtp", "0", "--dep-size", "8", "--tp-size", "8",
           "--gen-tp", "8", "--gen-batch", "4,6,8,12", "--duration", "300"]


def _tp_outcome(*extra, stated: bool = True):
    """The TP-context answer to AICQ_16 (DWDP and DEP context left out: the question's answer is TP8 prefill);
    stated False: the decode step priced as before the stated routing / communication reached it."""
    from dataclasses import replace
    from dwdp_trtllm.sizing import search as se
    spec, probs = size_cmd.problems(build_parser().parse_args(["size", *AICQ_16, *extra]))
    dc = decode_cost(spec.model, spec.gpu.name, spec.weight_dtype, 0, **(stated_pricing(spec) if stated else {}))
    p = replace(probs[0][1], dwdp_sizes=(), dep_sizes=())
    return se.search(p, dc)["tp"]


def test_the_search_finds_aiconfigurators_16_gpu_answer():
    """aiconfigurator's ISL 8K / OSL 1K question in 16 GPUs (its answer: TP8 prefill + gen8 tp1pp1dp8etp2ep4 at
    batch 6, 1.464 req/s). With the decode experts at balanced rows and DeepEP (the old pricing, whatever the
    question states) no 8-GPU generation server meets TPOT 30 ms: none. Priced as stated (power-law rows, NCCL
    all-gather + reduce-scatter) an 8-GPU server does; offered MoE TP, the search picks aiconfigurator's own shape,
    etp2ep4 at batch 6 (faster than EP8 at that batch: higher TPS/user at the same GPUs)."""
    o = _tp_outcome("--gen-moe-tp", "1,2", stated=False)
    assert o.deployment is None and "--tps-user" in o.why_none
    o = _tp_outcome()
    assert o.deployment is not None and o.deployment.gpus == 16 and o.deployment.gen_shape() == "", o.why_none
    ep8 = o.metrics.tps_user
    o = _tp_outcome("--gen-moe-tp", "1,2")
    d = o.deployment
    assert d is not None and (d.gpus, d.gen_tp, d.gen_attn_tp, d.gen_moe_tp, d.gen_batch) == (16, 8, 1, 2, 6)
    assert o.metrics.tps_user >= 33.33 and o.metrics.tps_user > ep8
