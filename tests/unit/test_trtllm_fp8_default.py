"""The dwdp_trtllm engine's FP8 default on sm_90 (issue 25): multi_buffer first, the composite view the fallback, then
merge, because our whole routed-expert op measured faster on the H200 than TensorRT-LLM's fp8_block CUTLASS MoE
(aiconfigurator's table, TensorRT-LLM 1.3.0rc20), the stock kernel the composite view feeds, at 8K and 16K tokens and
about even at 4K in the latest 2026-12-03 run: 0.98-1.41x with uniform routing (0.98x at 4K tokens), 1.25-1.48x
power-law (integration/moe_evidence.py, docs/BENCHMARKS.md "Routed-expert op (FP8, Hopper)"). BF16 keeps the composite view first. Before this
change gen-config wrote `gemm: composite_view` for every weight dtype and the reasons named no measurement."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from dwdp_trtllm.cli import main
from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.integration.gemm_choice import choose_gemm, device_sm, expert_weight_dtype, transport_for
from dwdp_trtllm.integration.moe_evidence import default_gemm, fp8_sm90_reason, gemm_order, measured_case
from dwdp_trtllm.core.placement import make_placement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_trtllm_fake_world import _env, era_tree  # noqa: E402

FP8_NAMES = ("w3_w1_weight", "w2_weight", "w3_w1_weight_scaling_factor", "w2_weight_scaling_factor")


def _choose(want, *, transport="vmm_fd", mb=None, fp8_sm90=True, default=False):
    cfg = DwdpConfig(dwdp_size=2)
    return choose_gemm(want, device_type="cuda", transport_kind=transport, placement=make_placement(cfg, 8), rank=1,
                       blocker=mb, fp8_sm90=fp8_sm90, default=default)


def test_default_per_weight_dtype_and_gpu():
    """multi_buffer for FP8 block scales on sm_90 only (what was measured); the composite view for BF16 and for FP8
    on another GPU or none known (the adapter's choice there since the review: one function now says it)."""
    assert default_gemm("fp8", 90) == "multi_buffer"
    assert default_gemm("bf16", 90) == "composite_view"
    assert default_gemm("fp8", 100) == default_gemm("fp8", None) == "composite_view"


def test_check_trtllm_line_says_what_the_adapter_does_on_that_gpu():
    """Review finding: gemm_order said multi_buffer for FP8 block scales on any GPU while the adapter's default off
    sm_90 is the composite view. Now the line follows default_gemm for the GPU check-trtllm sees; with none, it gives
    both cases."""
    assert gemm_order("fp8", sm=90).startswith("multi_buffer (") and "[default on sm_90]" in gemm_order("fp8", sm=90)
    blackwell = gemm_order("fp8", sm=100)
    assert blackwell.startswith("composite_view (") and "[default on sm_100]" in blackwell and "Why" not in blackwell
    none = gemm_order("fp8")
    assert none.startswith("multi_buffer (") and "[default on sm_90 GPUs]" in none, none
    assert "On other GPUs: composite_view (" in none and fp8_sm90_reason() in none
    assert gemm_order("fp8", "multi_buffer", sm=100).endswith("[requested].")  # a request: no measurement claimed
    assert gemm_order("bf16", sm=90).startswith("composite_view (")


def test_fp8_default_order_multi_buffer_then_composite_then_merge():
    g, why = _choose(default_gemm("fp8", 90))
    assert g == "multi_buffer"
    assert fp8_sm90_reason() in why  # the measurement and both sources, in the log and gemm_reason
    assert "5.49 / 8.57 / 15.58 ms" in why and "h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet" in why
    g, why = _choose(default_gemm("fp8", 90), mb="w3_w1_bias is set")  # unit refused: the composite view
    assert g == "composite_view" and "multi_buffer requested but not possible (w3_w1_bias is set)" in why
    g, why = _choose(default_gemm("fp8", 90), transport="ipc", mb="w3_w1_bias is set")  # neither: merge
    assert g == "merge" and "composite view not possible" in why


def test_bf16_and_explicit_requests_unchanged():
    """BF16 (fp8_sm90 False) keeps the composite view first with today's reason; an explicit composite_view request
    for FP8 is honoured; a multi_buffer choice off sm_90 or for BF16 names no FP8 measurement."""
    assert _choose(default_gemm("bf16", 90), fp8_sm90=False) == \
        ("composite_view", "local experts mapped beside the slot (no local copy)")
    assert _choose("composite_view")[0] == "composite_view"
    g, why = _choose("multi_buffer", fp8_sm90=False)
    assert g == "multi_buffer" and "FP8" not in why


def test_fp8_block_sm90_needs_e4m3_block_scales_on_sm90():
    cuda = torch.device("cuda", 0)
    f8 = torch.float8_e4m3fn
    def fp8_block_sm90(dtype, names, device, capability=None):  # what AdapterRuntime asks (fp8_sm90)
        return measured_case(expert_weight_dtype(dtype, names), device_sm(device, capability))
    assert fp8_block_sm90(f8, FP8_NAMES, cuda, capability=(9, 0))
    assert not fp8_block_sm90(f8, FP8_NAMES, cuda, capability=(10, 0))  # Blackwell: not what was measured
    assert not fp8_block_sm90(torch.bfloat16, FP8_NAMES[:2], cuda, capability=(9, 0))
    assert not fp8_block_sm90(f8, FP8_NAMES[:2], cuda, capability=(9, 0))  # FP8 without block scales
    assert not fp8_block_sm90(f8, FP8_NAMES, torch.device("cpu"))
    assert device_sm(cuda, capability=(9, 0)) == 90 and device_sm(torch.device("cpu")) is None


def test_gen_config_leaves_the_gemm_to_the_gpu_it_runs_on(tmp_path):
    """Review finding: gen-config wrote `gemm: multi_buffer` for FP8 whatever the GPU (a request, so the adapter ran it
    off sm_90 too, where its own default is the composite view). Now it writes no gemm: the loaded file requests
    none and the adapter's default_gemm decides on the deployed GPU; the file's header says so."""
    from dwdp_trtllm.integration.settings import load_integration_config
    for dtype in ("fp8", "bf16"):
        out = tmp_path / dtype
        assert main(["gen-config", "--model", "/ckpt/m", "--out", str(out), "--mode", "disaggregated", "--preset",
                     "deepseek-r1", "--gen-tp", "4", "--dwdp-size", "4", "--gpu-memory-gb", "800",
                     "--weight-dtype", dtype]) == 0
        text = (out / "dwdp.yaml").read_text()
        assert "gemm" not in yaml.safe_load(text)["dwdp_config"], dtype
        assert load_integration_config(out / "dwdp.yaml").gemm_requested is None
        assert "# no gemm: the engine picks it on the GPU it runs on" in text


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
    why = fp8_sm90_reason()  # the measured evidence as moe_evidence words it (it moves with the measurements)
    assert lines[False].startswith("multi_buffer (") and why in lines[False]
    assert lines[True].startswith("composite_view (") and why not in lines[True]


def test_integration_yaml_without_gemm_gets_the_measured_default(tmp_path):
    """Review finding: an integration YAML without `gemm` ran DwdpConfig's default (merge, the bench engine's) and
    the log / check-trtllm said "gemm: merge requested" though nothing was. Now the adapter tries the measured default
    for the weights at hand (FP8 block scales on sm_90: multi_buffer; else the composite view), says it is the
    default, and keeps the usual fallbacks; the bench engine's DwdpConfig default stays merge."""
    from dwdp_trtllm.integration.settings import load_integration_config
    p = tmp_path / "dwdp.yaml"
    p.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 2, "weight_dtype": "fp8"}}))
    c = load_integration_config(p)
    assert c.gemm_requested is None and c.dwdp.gemm == "merge" == DwdpConfig().gemm  # bench default unchanged
    p2 = tmp_path / "given.yaml"
    p2.write_text(yaml.safe_dump({"dwdp_size": 2, "gemm": "merge"}))
    assert load_integration_config(p2).gemm_requested == "merge"
    g, why = _choose(default_gemm("fp8", 90), default=True)
    assert g == "multi_buffer" and why.startswith("gemm: multi_buffer default") and "requested" not in why
    assert fp8_sm90_reason() in why
    g, why = _choose(default_gemm("fp8", 90), default=True, mb="w3_w1_bias is set")  # fallbacks as before
    assert g == "composite_view" and "multi_buffer default (the integration config names no gemm) but not possible" in why
    g, why = _choose(default_gemm("fp8", 100), default=True, fp8_sm90=False)
    assert g == "composite_view" and why.startswith("gemm: composite_view default") and "requested" not in why
    tree = era_tree(tmp_path, "lifecycle")
    import json
    r = subprocess.run([sys.executable, "-m", "dwdp_trtllm.cli", "check-trtllm", "--json", "--dwdp", str(p)],
                       env=_env(tree, tmp_path, {}), capture_output=True, text=True, timeout=120)
    mode = json.loads(r.stdout)["our_mode"]
    assert mode["gemm"].startswith("multi_buffer (") and mode["gemm_requested"] is None, mode


def test_fake_world_without_gemm_does_not_run_merge(tmp_path):
    """End to end on the fake TensorRT-LLM (CPU, BF16): no `gemm` in the YAML -> the default (composite view) cannot
    be mapped on CPU and the stand-in is for explicit requests only, so the multi_buffer unit runs; before, merge ran
    with the reason "gemm: merge requested". Outputs equal the reference."""
    from test_trtllm_fake_world import run_world
    outs, ref = run_world(tmp_path, "hooks", "bf16", dwdp={}, ref_gemm="multi_buffer")
    for r, got in enumerate(outs):
        assert got["gemm"] == "multi_buffer", got["gemm_reason"]
        assert got["gemm_reason"].startswith("gemm: composite_view default (the integration config names no gemm); "
                                             "composite view not possible"), got["gemm_reason"]
        assert "requested" not in got["gemm_reason"]
        for k, y in got["outs"].items():
            assert torch.equal(y, ref[k]), f"rank {r} step {k[1]}"


def test_transport_for_auto_picks_vmm_fd_where_the_gemm_maps_local_experts():
    """Review finding: the `transport: auto` -> vmm_fd rule was inline in model_setup with no test. The rule, pinned:
    on CUDA, auto becomes vmm_fd for composite_view and multi_buffer (its fallback is the composite view) and for no
    gemm named (the adapter's default is one of those); merge / reference requested and every CPU case keep auto
    (make_transport decides); a named transport is never changed."""
    cases = {  # (kind, device, gemm the config names or None) -> transport
        ("auto", "cuda", "composite_view"): "vmm_fd",
        ("auto", "cuda", "multi_buffer"): "vmm_fd",
        ("auto", "cuda", None): "vmm_fd",  # no gemm named: cfg.gemm is DwdpConfig's merge, not asked for
        ("auto", "cuda", "merge"): "auto",
        ("auto", "cuda", "reference"): "auto",
        ("auto", "cpu", "composite_view"): "auto",
        ("auto", "cpu", None): "auto",
        ("ipc", "cuda", "composite_view"): "ipc",
        ("vmm_fabric", "cuda", None): "vmm_fabric",
    }
    for (kind, dev, req), want in cases.items():
        assert transport_for(kind, device_type=dev, gemm_requested=req) == want, (kind, dev, req)
    for wd, sm in (("fp8", 90), ("fp8", 100), ("bf16", 90)):  # every default the adapter may try first, named:
        assert transport_for("auto", device_type="cuda", gemm_requested=default_gemm(wd, sm)) == "vmm_fd"  # mappable
    src = (Path(__file__).resolve().parents[2] / "dwdp_trtllm/integration/trtllm/model_setup.py").read_text()
    assert "transport_for(cfg.transport" in src and '"vmm_fd"' not in src  # the one place the rule lives
    # one type, one meaning end to end: the integration config's gemm_requested (str | None) reaches transport_for and
    # AdapterRuntime as it is (it was turned into a bool for them while settings kept the str)
    assert src.count("gemm_requested=icfg.gemm_requested") == 2 and "gemm_requested is not None" not in src
    with pytest.raises(TypeError):  # the old bool form is gone
        transport_for("auto", device_type="cuda", gemm="merge", gemm_requested=True)


def test_fp8_reason_names_the_gpu_measured_and_says_when_this_is_another():
    """Review finding: the FP8 default's evidence is one H200 run, but its reason was given on any sm_90 GPU as if
    measured there. The default stays (same sm_90 kernels); the reason names the NVIDIA H200 always, and on another
    sm_90 GPU says the measurement was made on an H200, not on this device."""
    assert "by measurement on an NVIDIA H200" in fp8_sm90_reason() and "this device" not in fp8_sm90_reason()
    assert "by measurement on an NVIDIA H200" in gemm_order("fp8")  # check-trtllm: the GPU is not known there
    cfg = DwdpConfig(dwdp_size=2)
    kw = dict(device_type="cuda", transport_kind="vmm_fd", placement=make_placement(cfg, 8), rank=1, blocker=None,
              fp8_sm90=True)
    g, why = choose_gemm("multi_buffer", **kw, device_name="NVIDIA H100 80GB HBM3")
    assert g == "multi_buffer"  # the default is kept on another sm_90 GPU
    assert "measured on an NVIDIA H200, not this device (NVIDIA H100 80GB HBM3)" in why
    g, why = choose_gemm("multi_buffer", **kw, device_name="NVIDIA H20")
    assert g == "multi_buffer" and "not this device (NVIDIA H20)" in why
    g, why = choose_gemm("multi_buffer", **kw, device_name="NVIDIA H200")
    assert "this device (NVIDIA H200) is the GPU measured" in why and "not this device" not in why
