"""gemm multi_buffer on the TensorRT-LLM host: the execution unit (integration/trtllm/moe_unit.py) that replaces
CutlassFusedMoE.run_moe on DWDP layers, and the adapter's path choice (integration/gemm_choice.py choose_gemm).

The world runs (both lifecycles, BF16 / FP8 block scales, bit-exact over three forwards) are in
test_trtllm_fake_world.py; here: the unit computes what the stock kernel computes (the fake tree's stand-in for
torch.ops.trtllm.fused_moe, SwiGLU on [w3; w1] as moe_kernels.cu) through both run_moe calling conventions, a unit
that ignored the w3/w1 order is caught, the unit's argument handling and refusals, and the path choice with reasons.
"""
import functools
import importlib.util
import inspect
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.engine.moe_compute import identity_map
from dwdp_trtllm.integration.gemm_choice import NO_UNIT, choose_gemm
from dwdp_trtllm.integration.trtllm import moe_unit
from dwdp_trtllm.core.placement import make_placement
from dwdp_trtllm.core.runtime import expert_maps, local_slot_sources

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_trtllm_fake_world import FAKES, _env, era_tree  # noqa: E402

STOCK_VS_UNIT = """
import inspect, sys, torch
from types import SimpleNamespace
from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
from tensorrt_llm._torch.models.modeling_tiny import H
from dwdp_trtllm.integration.trtllm import moe_unit
args = SimpleNamespace(quant=None if sys.argv[1] == "bf16" else sys.argv[1], seed=7, dwdp_config=None,
                       disable_overlap_scheduler=True)
model, _ = ModelLoader(args).load("ckpt", None)
moe = model.mlp[0].experts
x = torch.randn(40, H, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16).float()
logits = model.mlp[0].gate(x)
with torch.no_grad():
    ref = moe(x, logits)  # stock run_moe: the fake's stand-in for torch.ops.trtllm.fused_moe
    units = moe_unit.install_reference(model)
    got = moe(x, logits)
    moe_unit.UP_FIRST = False  # a unit taking w3_w1's first half as the gate
    wrong = moe(x, logits)
    moe_unit.UP_FIRST = True
    calls = units[0].calls
    b = moe.backend
    # upstream's alltoall state on a ConfigurableMoE backend (without_comm=True): NotEnabled, enable_alltoall False;
    # the keyword run_moe with enable_alltoall omitted reads that cached_property (fused_moe_cutlass.py id 55194060208)
    a2a = (b.alltoall_method_type.name, b.enable_alltoall, b.w3_w1_bias, b.w2_bias)
    if "ctx" not in inspect.signature(type(b).run_moe).parameters:
        ids, w = moe.routing_method.apply(logits)
        assert torch.equal(b.run_moe(x=x, token_selected_experts=ids.to(torch.int32), token_final_scales=w), got)
rel = lambda y: float((y - ref).norm() / ref.norm())
print(rel(got), rel(wrong), calls, len(units), *a2a)
"""


@pytest.mark.parametrize("era", ["lifecycle", "hooks"])
@pytest.mark.parametrize("quant,tol", [("bf16", 0.01), ("fp8_block_scales", 0.08)])
def test_multi_buffer_unit_matches_stock_kernel(tmp_path, era, quant, tol):
    """Through upstream's call path of that era (lifecycle: run_moe(MoERunContext); hooks: keyword run_moe), the
    unit's output is the stock kernel's within rounding: bf16 activations (the stand-in multiplies in float32),
    FP8 additionally quantises activations 1x128 as the engine does (the stand-in does not). Reading w3_w1 as
    gate | up (UP_FIRST off) the error is of the order of the output itself."""
    tree = era_tree(tmp_path, era)
    r = subprocess.run([sys.executable, "-c", STOCK_VS_UNIT, quant], env=_env(tree, tmp_path, {}), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    err, wrong, calls, n_units, *a2a = r.stdout.split()
    assert float(err) < tol, r.stdout
    assert float(wrong) > 0.5, r.stdout
    assert (int(calls), int(n_units)) == (2, 3)  # layer 0's unit ran twice; one unit per MoE layer
    assert a2a == ["NotEnabled", "False", "None", "None"], r.stdout


class _Backend(torch.nn.Module):
    """Just what the unit reads of a CutlassFusedMoE (keyword run_moe of fused_moe_cutlass.py id 55194060208)."""

    def __init__(self, E=4, H=16, I=8):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.w3_w1_weight = torch.nn.Parameter((torch.randn(E, 2 * I, H, generator=g) * 0.2).to(torch.bfloat16),
                                               requires_grad=False)
        self.w2_weight = torch.nn.Parameter((torch.randn(E, H, I, generator=g) * 0.2).to(torch.bfloat16),
                                            requires_grad=False)
        self.w3_w1_bias = self.w2_bias = None
        self.alltoall_method_type = "NotEnabled"  # __init__ sets it in both branches (id 55194060208)

    @functools.cached_property
    def enable_alltoall(self):  # as upstream: `self.alltoall_method_type != AlltoallMethodType.NotEnabled`
        return self.alltoall_method_type != "NotEnabled"

    def run_moe(self, x, token_selected_experts, token_final_scales, x_sf=None, is_sf_swizzled=True,
                output_dtype=None, tuner_num_tokens=None, tuner_top_k=None, moe_output=None, enable_alltoall=None,
                lora_params=None):
        raise AssertionError("the stock run_moe must not run once the unit is installed")


def _inputs(T=6, E=4, H=16, K=2):
    g = torch.Generator().manual_seed(2)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
    return torch.randn(T, H, generator=g).to(torch.bfloat16), ids, torch.rand(T, K, generator=g)


def test_unit_both_conventions_moe_output_and_refusals():
    b = _Backend()
    src = {"s": moe_unit.full_sources(b)}
    unit = moe_unit.install(b, lambda: src["s"])
    assert b.run_moe is unit and isinstance(b.__dict__["run_moe"], moe_unit.RunMoe)
    x, ids, w = _inputs()
    direct = moe_unit.routed_forward(x, ids, w, src["s"], torch.float32)
    assert torch.equal(b.run_moe(x, ids, w, output_dtype=torch.float32), direct)  # positional, as bound
    assert torch.equal(b.run_moe(x=x, token_selected_experts=ids, token_final_scales=w, output_dtype=torch.float32),
                       direct)
    out = torch.full((x.shape[0], x.shape[1]), 7.0)
    assert b.run_moe(x=x, token_selected_experts=ids, token_final_scales=w, output_dtype=torch.float32,
                     moe_output=out) is out
    assert torch.equal(out, direct)
    plan = SimpleNamespace(moe_output=None, enable_alltoall=False)  # MoERunContext / MoECommPlan (id 57374981836)
    ctx = SimpleNamespace(x=x, token_selected_experts=ids, token_final_scales=w, x_sf=None, output_dtype=torch.float32,
                          do_finalize=True, lora_params=None, comm_plan=plan)
    assert torch.equal(b.run_moe(ctx, workspace=None), direct)
    assert torch.equal(b.run_moe(x, ids, None), moe_unit.routed_forward(x, ids, torch.ones(ids.shape), src["s"], x.dtype))
    assert b.run_moe(x[:0], ids[:0], w[:0]).shape == (0, x.shape[1])
    with pytest.raises(RuntimeError, match="pre-quantised"):
        b.run_moe(x, ids, w, x_sf=torch.ones(1))
    with pytest.raises(RuntimeError, match="enable_alltoall"):
        b.run_moe(x, ids, w, enable_alltoall=True)
    src["s"] = None  # released: the slot may be refilled
    with pytest.raises(RuntimeError, match="outside wait_and_bind"):
        b.run_moe(x, ids, w)
    again = moe_unit.install(b, lambda: None)
    assert again.original == unit.original  # re-installing keeps the class method, not the previous unit


def test_unit_maps_arguments_without_binding_per_call(monkeypatch):
    """The original's parameters and defaults are read at install; a call neither binds a Signature nor builds the
    layer name; what does not fit the original is a TypeError; enable_alltoall=None reads the backend's
    cached_property (upstream: alltoall_method_type != NotEnabled, fused_moe_cutlass.py id 55194060208)."""
    b = _Backend()
    src = moe_unit.full_sources(b)
    unit = moe_unit.install(b, lambda: src)
    x, ids, w = _inputs()
    want = moe_unit.routed_forward(x, ids, w, src, torch.float32)

    def no_bind(*a, **k):
        raise AssertionError("inspect.Signature.bind called per run_moe call")
    monkeypatch.setattr(inspect.Signature, "bind", no_bind)
    monkeypatch.setattr(moe_unit.RunMoe, "_name", lambda self: pytest.fail("layer name built for a call that passed"))
    assert torch.equal(b.run_moe(x, ids, w, None, True, torch.float32), want)  # positional up to output_dtype
    assert torch.equal(b.run_moe(x, ids, w, output_dtype=torch.float32, tuner_num_tokens=6, lora_params=None), want)
    monkeypatch.undo()
    with pytest.raises(TypeError, match="do not fit"):
        b.run_moe(x, ids, w, not_an_argument=1)
    with pytest.raises(TypeError, match="do not fit"):
        b.run_moe(x, ids, w, *([None] * 10))
    b2 = _Backend()
    b2.alltoall_method_type = "NVLinkOneSided"
    moe_unit.install(b2, lambda: moe_unit.full_sources(b2))
    with pytest.raises(RuntimeError, match="enable_alltoall"):
        b2.run_moe(x, ids, w)  # enable_alltoall=None: the backend's cached_property says True
    assert unit.calls == 2


def test_unit_reads_local_and_slot_like_the_full_set():
    """[local, slot] sources built as AdapterRuntime and DwdpRuntime build them (runtime.expert_maps +
    local_slot_sources over uint8 buffers: the exported local experts, the slot in fetched order) give the bits of
    the one-buffer [E, ...] reference."""
    b = _Backend(E=8)
    full = moe_unit.full_sources(b)
    placement = make_placement(DwdpConfig(dwdp_size=2), 8)
    local_ids, fetch_ids = placement.local_experts[1], placement.fetch_experts(1)
    specs = [(n, tuple(t[0].shape[1:]), t[0].dtype) for n, t in full.buffers.items()]

    def as_u8(t, rows):  # those experts' bytes, then spare bytes (slots may be larger than their rows)
        return torch.cat([t[0][list(rows)].reshape(-1).view(torch.uint8), torch.zeros(3, dtype=torch.uint8)])
    local_u8 = [as_u8(t, local_ids) for t in full.buffers.values()]
    slot_u8 = [as_u8(t, fetch_ids) for t in full.buffers.values()]
    split = local_slot_sources(specs, local_u8, slot_u8, len(local_ids), len(fetch_ids),
                               expert_maps(placement, 1, torch.device("cpu")))
    assert split.buffers["w2_weight"][0].untyped_storage().data_ptr() == local_u8[1].untyped_storage().data_ptr()
    x, ids, w = _inputs(T=20, E=8)
    assert torch.equal(moe_unit.routed_forward(x, ids, w, split, torch.float32),
                       moe_unit.routed_forward(x, ids, w, full, torch.float32))


def test_unit_is_the_engines_routed_experts_forward():
    """The unit computes through engine/moe_compute.routed_experts_forward (gemm multi_buffer, up_first: TensorRT-LLM's
    w3 | w1 rows read in place), bit for bit; with up_first off (gate | up) the result differs."""
    from dwdp_trtllm.engine.moe_compute import routed_experts_forward
    b = _Backend(E=8)
    src = moe_unit.full_sources(b)
    x, ids, w = _inputs(T=20, E=8)
    args = (x, ids.long(), w, src.buffers["w3_w1_weight"], src.buffers["w2_weight"], src.expert_buffer_idx_E,
            src.expert_row_E)
    got = moe_unit.routed_forward(x, ids, w, src, x.dtype)
    assert torch.equal(got, routed_experts_forward(*args, gemm="multi_buffer", up_first=True))
    assert not torch.equal(got, routed_experts_forward(*args, gemm="multi_buffer", up_first=False))


def _fake_activation_enum():
    """ActivationType of the fake tree's tensorrt_llm/_torch/utils.py, loaded from its file (no tensorrt_llm package
    in this process); the fake-world runs read it through moe_unit.upstream_activation_enum's import."""
    spec = importlib.util.spec_from_file_location("_fake_trtllm_utils", FAKES / "tensorrt_llm/_torch/utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ActivationType


def test_blocker_reasons(monkeypatch):
    cpu = torch.device("cpu")
    b = _Backend()
    names = ("w3_w1_weight", "w2_weight")
    assert moe_unit.blocker(b, names, cpu) is None
    b.w3_w1_bias = torch.zeros(1)
    assert "w3_w1_bias is set" in moe_unit.blocker(b, names, cpu)
    b.w3_w1_bias = None
    # upstream MoE.__init__ stores an int (interface.py @ 581f0712), read against the installed enum
    ActivationType = _fake_activation_enum()
    monkeypatch.setattr(moe_unit, "upstream_activation_enum", lambda: ActivationType)
    b.activation_type = int(ActivationType.Geglu)
    assert "activation Geglu (6)" in moe_unit.blocker(b, names, cpu)
    b.activation_type = int(ActivationType.Swiglu)
    assert moe_unit.blocker(b, names, cpu) is None
    b.activation_type = 3  # Swiglu in common.h @ 8b532363; Relu in the installed (fake) enum: judged by the latter
    assert "activation Relu (3)" in moe_unit.blocker(b, names, cpu)
    b.activation_type = ActivationType.Swiglu  # an enum member: by name
    assert moe_unit.blocker(b, names, cpu) is None
    b.activation_type = ActivationType.Geglu
    assert "activation Geglu" in moe_unit.blocker(b, names, cpu)
    b.activation_type = int(ActivationType.Swiglu)
    monkeypatch.setattr(moe_unit, "upstream_activation_enum", lambda: None)  # no enum to read the int against
    assert "cannot tell whether it is SwiGLU" in moe_unit.blocker(b, names, cpu)
    monkeypatch.setattr(moe_unit, "upstream_activation_enum", lambda: ActivationType)
    b.w3_w1_weight.data = b.w3_w1_weight.data.to(torch.float8_e4m3fn)
    assert "without 128x128 block scales" in moe_unit.blocker(b, names, cpu)
    assert "not a multiple of 128" in moe_unit.blocker(b, names + ("w3_w1_weight_scaling_factor",
                                                                   "w2_weight_scaling_factor"), cpu)
    assert "has no run_moe" in moe_unit.blocker(torch.nn.Linear(2, 2), names, cpu)


def _choose(want, *, device="cuda", transport="vmm_fd", mb=None, redundant=0, composite_error=None):
    cfg = DwdpConfig(dwdp_size=2, redundant_experts=redundant)
    return choose_gemm(want, device_type=device, transport_kind=transport, placement=make_placement(cfg, 8), rank=1,
                       blocker=mb, composite_error=composite_error)


def test_choose_gemm_prefers_composite_then_multi_buffer_then_merge():
    assert _choose("composite_view")[0] == "composite_view"
    g, why = _choose("composite_view", transport="ipc")  # the view needs cuMem allocations
    assert g == "multi_buffer" and "composite view not possible (composite_view needs transport vmm_fd" in why
    assert "dwdp::grouped_gemm reads [local, slot] in place" in why
    g, why = _choose("composite_view", redundant=1)  # rank 1's experts wrap around: no single [a, b) run
    assert g == "multi_buffer" and "wrap around" in why
    g, why = _choose("composite_view", transport="ipc", mb="dwdp::grouped_gemm is unavailable: no nvcc")
    assert g == "merge" and "multi_buffer not possible (dwdp::grouped_gemm is unavailable: no nvcc)" in why
    g, why = _choose("composite_view", transport="ipc", mb=NO_UNIT)
    assert g == "merge" and "multi_buffer not possible (no multi_buffer execution unit on this host)" in why
    g, why = _choose("multi_buffer")
    assert g == "multi_buffer" and why.startswith("gemm: multi_buffer requested")
    g, why = _choose("multi_buffer", mb="activation Geglu: ...")
    assert g == "composite_view" and "multi_buffer requested but not possible (activation Geglu" in why
    g, why = _choose("multi_buffer", transport="ipc", mb="activation Geglu: ...")
    assert g == "merge" and "composite view not possible" in why
    assert _choose("merge") == ("merge", "gemm: merge requested")
    g, why = _choose("multi_buffer", device="cpu", transport="shm")
    assert g == "multi_buffer"
    assert _choose("composite_view", device="cpu", transport="shm")[0] == "composite_view"  # the CPU stand-in
    g, why = _choose("reference", device="cpu", transport="shm")
    assert g == "multi_buffer" and why.startswith("gemm: reference is the embedded engine's")


def test_choose_gemm_after_a_failed_composite_build_keeps_the_note():
    """AdapterRuntime chooses again with composite_error when the chosen composite view cannot be built (e.g. expert
    bytes off the VMM granularity): the reason still says what was asked and refused before."""
    err = "expert bytes off the 2 MiB granularity"
    g, why = _choose("multi_buffer", mb="activation Geglu: ...", composite_error=err)
    assert g == "merge"
    assert why.startswith("gemm: multi_buffer requested but not possible (activation Geglu: ...); "
                          f"composite view not possible ({err}); merge:"), why
    assert why.count("multi_buffer not possible") == 0 and why.count("activation Geglu") == 1
    g, why = _choose("composite_view", composite_error=err)
    assert g == "multi_buffer" and why.startswith(f"composite view not possible ({err}); multi_buffer:"), why
    g, why = _choose("reference", mb=NO_UNIT, composite_error=err)
    assert g == "merge" and why.startswith("gemm: reference is the embedded engine's") and err in why
