"""The dwdp_trtllm engine's FP8 default on sm_90 (issue 25): multi_buffer first, the composite view the fallback, then
merge, because our whole routed-expert op measured faster on the H200 than TensorRT-LLM's fp8_block CUTLASS MoE
(aiconfigurator's table, TensorRT-LLM 1.3.0rc20), the stock kernel the composite view feeds, at every point of the
2026-12-03 run: 1.06-1.39x with uniform routing (only 1.06x at 4K tokens), 1.32-1.44x power-law
(integration/moe_evidence.py, docs/BENCHMARKS.md section 12). BF16 keeps the composite view first. Before this
change gen-config wrote `gemm: composite_view` for every weight dtype and the reasons named no measurement."""
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from dwdp_trtllm.cli import main
from dwdp_trtllm.config import DwdpConfig
from dwdp_trtllm.integration.adapter import choose_gemm, fp8_block_sm90
from dwdp_trtllm.integration.moe_evidence import default_gemm, fp8_sm90_reason, gemm_order
from dwdp_trtllm.placement import make_placement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_trtllm_fake_world import _env, era_tree  # noqa: E402

FP8_NAMES = ("w3_w1_weight", "w2_weight", "w3_w1_weight_scaling_factor", "w2_weight_scaling_factor")


def _choose(want, *, transport="vmm_fd", mb=None, fp8_sm90=True):
    cfg = DwdpConfig(dwdp_size=2)
    return choose_gemm(want, device_type="cuda", transport_kind=transport, placement=make_placement(cfg, 8), rank=1,
                       blocker=mb, fp8_sm90=fp8_sm90)


def test_default_per_weight_dtype():
    assert default_gemm("fp8") == "multi_buffer"
    assert default_gemm("bf16") == "composite_view"


def test_fp8_default_order_multi_buffer_then_composite_then_merge():
    g, why = _choose(default_gemm("fp8"))
    assert g == "multi_buffer"
    assert fp8_sm90_reason() in why  # the measurement and both sources, in the log and gemm_reason
    assert "5.10 / 8.42 / 15.88 ms" in why and "h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet" in why
    g, why = _choose(default_gemm("fp8"), mb="w3_w1_bias is set")  # unit refused: the composite view
    assert g == "composite_view" and "multi_buffer requested but not possible (w3_w1_bias is set)" in why
    g, why = _choose(default_gemm("fp8"), transport="ipc", mb="w3_w1_bias is set")  # neither: merge
    assert g == "merge" and "composite view not possible" in why


def test_bf16_and_explicit_requests_unchanged():
    """BF16 (fp8_sm90 False) keeps the composite view first with today's reason; an explicit composite_view request
    for FP8 is honoured; a multi_buffer choice off sm_90 or for BF16 names no FP8 measurement."""
    assert _choose(default_gemm("bf16"), fp8_sm90=False) == \
        ("composite_view", "local experts mapped beside the slot (no local copy)")
    assert _choose("composite_view")[0] == "composite_view"
    g, why = _choose("multi_buffer", fp8_sm90=False)
    assert g == "multi_buffer" and "FP8" not in why


def test_fp8_block_sm90_needs_e4m3_block_scales_on_sm90():
    cuda = torch.device("cuda", 0)
    f8 = torch.float8_e4m3fn
    assert fp8_block_sm90(f8, FP8_NAMES, cuda, capability=(9, 0))
    assert not fp8_block_sm90(f8, FP8_NAMES, cuda, capability=(10, 0))  # Blackwell: not what was measured
    assert not fp8_block_sm90(torch.bfloat16, FP8_NAMES[:2], cuda, capability=(9, 0))
    assert not fp8_block_sm90(f8, FP8_NAMES[:2], cuda, capability=(9, 0))  # FP8 without block scales
    assert not fp8_block_sm90(f8, FP8_NAMES, torch.device("cpu"))


def test_gen_config_writes_the_default_per_dtype(tmp_path):
    """FP8 -> multi_buffer (it wrote composite_view before), BF16 -> composite_view."""
    for dtype, want in (("fp8", "multi_buffer"), ("bf16", "composite_view")):
        out = tmp_path / dtype
        assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), "--mode", "disaggregated", "--preset",
                     "deepseek-r1", "--gen-tp", "4", "--dwdp-size", "4", "--gpu-memory-gb", "800",
                     "--weight-dtype", dtype]) == 0
        assert yaml.safe_load((out / "dwdp.yaml").read_text())["dwdp_config"]["gemm"] == want, dtype


def test_check_trtllm_gemm_line_follows_the_config(tmp_path):
    """check-trtllm's GEMM line: the FP8 default with its reason; a config asking for composite_view gets that order."""
    assert gemm_order("fp8").startswith("multi_buffer (") and fp8_sm90_reason() in gemm_order("fp8")
    assert gemm_order("bf16").startswith("composite_view (") and "Why" not in gemm_order("bf16")
    tree = era_tree(tmp_path, "lifecycle")
    cfg = tmp_path / "dwdp.yaml"
    cfg.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 2, "weight_dtype": "fp8",
                                                                           "gemm": "composite_view"}}))
    import json
    lines = {}
    for args in ([], ["--dwdp", str(cfg)]):
        r = subprocess.run([sys.executable, "-m", "dwdp_trtllm.cli", "check-trtllm", "--json", *args],
                           env=_env(tree, tmp_path, {}), capture_output=True, text=True, timeout=120)
        lines[bool(args)] = json.loads(r.stdout)["our_mode"]["gemm"]
    assert lines[False].startswith("multi_buffer (") and "1.06-1.39x" in lines[False]
    assert lines[True].startswith("composite_view (") and "1.06-1.39x" not in lines[True]
