"""FP8 block-scale linear layers (engine/fp8_linear.py) on the CPU: which weights an FP8 checkpoint quantises, the
128x128 weight / 1x128 activation layout, the reference GEMM, and a model with FP8 linears against its dequantised
reference (docs/MODELS.md states the tolerance). The CUDA kernel against this reference: tests/gpu/test_fp8_linear_cuda.py."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from dwdp_trtllm.engine import fp8_linear as fl
from dwdp_trtllm.engine.fp8_linear import Fp8Linear, fp8_linear_names, fp8_linear_reference, to_fp8_linears
from dwdp_trtllm.engine.layers import MLAAttention, swiglu_mlp
from dwdp_trtllm.engine.local_experts import LocalExperts
from dwdp_trtllm.engine.model import MoETransformer
from dwdp_trtllm.engine.records import Segment
from dwdp_trtllm.engine.weights import init_dense_weights
from dwdp_trtllm.spec.models import get_model

#: ||engine - dequantised reference|| / ||reference|| of the hidden states of a 1 dense + 1 MoE layer model with FP8
#: linears (the 1x128 activation quantisation of ~6 chained GEMMs per layer is the only difference, ~2.5% RMS per
#: quantisation, plus the routing it flips); measured 0.063 here. docs/MODELS.md "FP8 linear layers"
MODEL_TOL = 0.10


def test_names_are_the_linears_an_fp8_release_quantises():
    spec = get_model("deepseek-r1", 4, 1)
    names = set(fp8_linear_names(spec))
    attn = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}
    want = {f"model.layers.{i}.self_attn.{p}.weight" for i in range(4) for p in attn}
    want |= {f"model.layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    want |= {f"model.layers.{i}.mlp.shared_experts.{p}_proj.weight" for i in (1, 2, 3) for p in ("gate", "up", "down")}
    assert names == want  # not the embedding, norms, router gate or its bias
    gqa = set(fp8_linear_names(get_model("tiny-gqa")))
    assert {n.split(".")[-2] for n in gqa} == {"q_proj", "k_proj", "v_proj", "o_proj"}


def test_quantize_layout_128x128_amax_over_448():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(300, 260, generator=g)
    f = Fp8Linear.quantize(w)
    assert f.w_NK.dtype == torch.float8_e4m3fn and tuple(f.w_NK.shape) == (300, 260)
    assert tuple(f.scale_NbKb.shape) == (3, 3) and f.shape == (300, 260)
    assert torch.allclose(f.scale_NbKb[1, 2], w[128:256, 256:260].abs().max() / 448)
    assert torch.allclose(f.scale_NbKb[2, 0], w[256:300, 0:128].abs().max() / 448)
    # e4m3 has 3 mantissa bits: every element within half a step (2**-4 relative) of its block's grid
    err = (f.dequantized() - w).abs()
    assert float((err / w.abs().clamp_min(1e-3)).max()) <= 2 ** -4 + 1e-6 or float(err.max()) < 1e-2
    assert 0 < float(err.max())


def test_checkpoint_codes_and_scales_are_kept_not_requantised():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(256, 256, generator=g)
    q, s = fl.quantize_fp8_blockwise(w, (128, 128))
    # a valid but non-canonical encoding: codes halved, scales doubled (requantising would give back q, s)
    q2, s2 = (q.float() / 2).to(torch.float8_e4m3fn), s * 2
    spec = get_model("tiny")
    dense = init_dense_weights(spec, 0, torch.float32, "cpu")
    name = "model.layers.0.self_attn.o_proj.weight"
    N, K = dense[name].shape
    dense[name] = q2[:N, :K].contiguous()
    dense[name + "_scale_inv"] = s2[:1, :1].contiguous()
    out = to_fp8_linears(spec, dense)
    assert torch.equal(out[name].w_NK.view(torch.uint8), q2[:N, :K].view(torch.uint8))
    assert torch.equal(out[name].scale_NbKb, s2[:1, :1])
    assert not any(k.endswith("_scale_inv") for k in out)


def test_gate_and_up_are_views_of_one_gate_up_weight():
    spec = dataclasses.replace(get_model("tiny"), dense_intermediate=256, moe_intermediate=128, hidden_size=128)
    w = to_fp8_linears(spec, init_dense_weights(spec, 0, torch.float32, "cpu"))
    for p in ("model.layers.0.mlp.", "model.layers.1.mlp.shared_experts."):
        g, u = w[p + "gate_proj.weight"], w[p + "up_proj.weight"]
        assert g.gate_up is not None and u.gate_up is None
        assert g.w_NK.data_ptr() == g.gate_up.w_NK.data_ptr()
        assert u.w_NK.data_ptr() == g.gate_up.w_NK.data_ptr() + g.out_features * g.w_NK.shape[1]
        assert torch.equal(g.gate_up.dequantized(), torch.cat([g.dequantized(), u.dequantized()]))


def _ref64(x, f):
    """Independent float64 statement of the recipe: x per 1x128 group scaled by amax/448, rounded to e4m3."""
    xs = []
    for c in range(0, x.shape[1], 128):
        blk = x[:, c:c + 128].double()
        s = blk.abs().amax(1, keepdim=True).clamp_min(1e-12) / 448
        xs.append((blk / s).clamp(-448, 448).to(torch.float8_e4m3fn).double() * s)
    return torch.cat(xs, 1) @ f.dequantized(torch.float64).t()


@pytest.mark.parametrize("T,K,N", [(1, 128, 64), (7, 256, 576), (33, 200, 130)])
def test_reference_is_the_recipe(T, K, N):
    g = torch.Generator().manual_seed(T)
    x, w = torch.randn(T, K, generator=g), torch.randn(N, K, generator=g) / K ** 0.5
    f = Fp8Linear.quantize(w)
    y = fp8_linear_reference(x, f)
    assert y.dtype == x.dtype and tuple(y.shape) == (T, N)
    ref = _ref64(x, f)
    assert float((y.double() - ref).norm() / ref.norm()) < 1e-6
    # against the unquantised product: FP8 error, small but not zero
    full = x.double() @ w.double().t()
    rel = float((y.double() - full).norm() / full.norm())
    assert 1e-4 < rel < 0.06
    assert torch.equal(fl.linear(x, f), y)  # CPU: linear runs the reference


def test_swiglu_fp8_is_the_composition_of_reference_linears():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(9, 128, generator=g)
    gate, up, down = (Fp8Linear.quantize(torch.randn(*s, generator=g) / 10) for s in ((256, 128), (256, 128), (128, 256)))
    y = swiglu_mlp(x, gate, up, down)
    gg, uu = fp8_linear_reference(x, gate), fp8_linear_reference(x, up)
    assert torch.equal(y, fp8_linear_reference(torch.nn.functional.silu(gg) * uu, down))


def test_kv_b_split_keeps_each_heads_blocks():
    spec = dataclasses.replace(get_model("tiny"), num_heads=2, num_kv_heads=2, qk_nope_head_dim=128, v_head_dim=128,
                               kv_lora_rank=256)
    w = to_fp8_linears(spec, init_dense_weights(spec, 0, torch.float32, "cpu"))
    attn = MLAAttention(spec, w, 0)
    w_kn, w_v = attn._kv_b_split()
    full = w["model.layers.0.self_attn.kv_b_proj.weight"].dequantized().view(2, 256, 256)
    assert torch.equal(w_kn.dequantized(), full[:, :128].reshape(256, 256))
    assert torch.equal(w_v.dequantized(), full[:, 128:].reshape(256, 256))


def _model(spec, dense, fp8):
    experts = LocalExperts.from_seed(spec, 0, "float32", "cpu")
    return MoETransformer(spec, dense, experts, device="cpu", dtype=torch.float32, fp8_linear=fp8)


def test_model_with_fp8_linears_against_its_dequantised_reference():
    spec = dataclasses.replace(get_model("tiny"), hidden_size=256, dense_intermediate=256, moe_intermediate=128,
                               num_layers=2, first_k_dense=1)
    dense = init_dense_weights(spec, 0, torch.float32, "cpu")
    # an FP8 checkpoint's view of the seeded weights: codes + scale_inv for every linear it quantises
    ckpt = dict(dense)
    for n in fp8_linear_names(spec):
        ckpt[n], ckpt[n + "_scale_inv"] = fl.quantize_fp8_blockwise(dense[n], (128, 128))
    eng, ref = _model(spec, ckpt, True), _model(spec, ckpt, False)
    assert all(isinstance(eng.w[n], Fp8Linear) for n in fp8_linear_names(spec))
    assert not any(isinstance(v, Fp8Linear) for v in ref.w.values())
    ids = torch.randint(0, spec.vocab_size, (40,), generator=torch.Generator().manual_seed(0))
    segs = [Segment(request_id=0, start=0, length=24, is_last=True), Segment(request_id=1, start=0, length=16, is_last=True)]
    a, b = eng(ids, segs), ref(ids, segs)
    rel = float((a - b).norm() / b.norm())
    assert 0 < rel < MODEL_TOL, rel


def _fp8_checkpoint(tmp_path, spec, name):
    """A seeded checkpoint whose `name` is stored as an FP8 release stores it, in a valid but non-canonical encoding
    (codes halved, scales doubled): kept codes are told apart from a re-quantisation."""
    from safetensors.torch import load_file, save_file

    from dwdp_trtllm.engine.loader import save_checkpoint
    from dwdp_trtllm.engine.weights import init_expert
    save_checkpoint(tmp_path, spec, init_dense_weights(spec, 3, torch.float32, "cpu"),
                    lambda l, e: init_expert(spec, l, e, 3, torch.float32, "cpu"))
    f = tmp_path / "model.safetensors"
    t = load_file(str(f))
    q, s = fl.quantize_fp8_blockwise(t[name], (128, 128))
    t[name], t[name + "_scale_inv"] = (q.float() / 2).to(torch.float8_e4m3fn), s * 2
    save_file(t, str(f))
    return t[name], t[name + "_scale_inv"]


def test_checkpoint_fp8_codes_reach_the_model_unchanged(tmp_path):
    from dwdp_trtllm.spec.config import load_bench_points
    from dwdp_trtllm.engine.loader import load_checkpoint
    from dwdp_trtllm.engine.worker import load_weights
    spec = get_model("tiny")
    name = "model.layers.1.self_attn.o_proj.weight"
    q, s = _fp8_checkpoint(tmp_path, spec, name)
    cfg = load_bench_points({"model": {"preset": "tiny", "checkpoint": str(tmp_path), "fp8_linear": True},
                             "run": {"device": "cpu"}})[1][0]
    dense, _ = load_weights(cfg, spec, torch.device("cpu"))
    assert dense[name].dtype == torch.float8_e4m3fn and torch.equal(dense[name + "_scale_inv"], s)
    eng = _model(spec, dense, True)
    assert torch.equal(eng.w[name].w_NK.view(torch.uint8), q.view(torch.uint8)) and torch.equal(eng.w[name].scale_NbKb, s)
    # FP8 linears off: the codes dequantised, bit-equal to the loader's dequantisation (today's path)
    plain, _ = load_checkpoint(tmp_path, spec, dtype=torch.float32, device="cpu")
    ids = torch.randint(0, spec.vocab_size, (21,), generator=torch.Generator().manual_seed(1))
    seg = [Segment(0, 0, 21, True)]
    assert torch.equal(_model(spec, dense, False)(ids, seg), _model(spec, plain, False)(ids, seg))
    assert not torch.equal(eng(ids, seg), _model(spec, plain, False)(ids, seg))


def test_fp8_linear_follows_the_expert_dtype_unless_set():
    from dwdp_trtllm.spec.config import load_bench_points
    pts = lambda m, d: load_bench_points({"model": {"preset": "tiny", **m}, "dwdp": {"weight_dtype": d},  # noqa: E731
                                          "run": {"device": "cuda" if d == "fp8" else "cpu"}})[1][0]
    assert fl.fp8_linear_on(pts({}, "fp8")) and not fl.fp8_linear_on(pts({}, "bf16"))
    assert not fl.fp8_linear_on(pts({"fp8_linear": False}, "fp8")) and fl.fp8_linear_on(pts({"fp8_linear": True}, "bf16"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_verify_with_fp8_linears_on_the_real_engine():
    """`dwdp verify` on the CPU (2 ranks, float32) with FP8 linear layers in every mode (the recipe's reference):
    DEP and DWDP against the reference mode within the float32 tolerance (the worker builds the model with
    model.fp8_linear: test_checkpoint_fp8_codes_reach_the_model_unchanged)."""
    from dwdp_trtllm.commands.verify import run_verify
    from dwdp_trtllm.spec.config import load_bench_points
    base = {"model": {"preset": "tiny", "dtype": "float32", "fp8_linear": True},
            "dwdp": {"dwdp_size": 2, "weight_dtype": "float32", "gemm": "reference"},
            "workload": {"isl": 40, "requests_per_rank": 2, "max_num_tokens": 48},
            "run": {"device": "cpu", "ranks": 2, "warmup_iters": 0, "timeout_s": 240}}
    rows, tol, ok = run_verify(load_bench_points(base)[1][0])
    assert set(rows) == {"dep", "dwdp"} and ok, rows
    assert all(0 <= r["hidden_rel"] <= tol for r in rows.values())


@pytest.mark.parametrize("entry", ["quant_1x128_parts", "prepare_parts"])
def test_parts_of_no_part_or_of_different_widths_are_a_clear_error(entry):
    """quant_1x128_parts / prepare_parts: an empty list, a part not 2-D or parts of different widths is a ValueError
    naming the function and its argument, the expected [rows_i, D] shape and the shapes given, raised before any
    kernel launch (was: an IndexError, or rows quantised at the first part's width). One check for both
    (quant_cuda.check_row_parts): each entry's error is that function's, under its own name."""
    from dwdp_trtllm.engine.quant_cuda import check_row_parts, quant_1x128_parts
    call, name = {"quant_1x128_parts": (quant_1x128_parts, "quant_1x128_parts: parts_AD"),
                  "prepare_parts": (lambda parts: fl.prepare_parts(parts, torch.randn(64, 256)),
                                    "prepare_parts: parts_TK")}[entry]
    a, b = torch.randn(3, 256, dtype=torch.bfloat16), torch.randn(2, 128, dtype=torch.bfloat16)
    for parts, want in (([], "expected at least one 2-D [rows, D] part, got none"),
                        ([a, b], "expected 2-D [rows_i, 256] parts, one width for all, got shapes [(3, 256), (2, 128)]"),
                        ([a, torch.randn(256, dtype=torch.bfloat16)],
                         "expected 2-D [rows_i, 256] parts, one width for all, got shapes [(3, 256), (256,)]")):
        with pytest.raises(ValueError) as got:
            call(parts)
        assert str(got.value) == f"{name}: {want}"
        with pytest.raises(ValueError) as shared:
            check_row_parts(parts, name)
        assert str(shared.value) == str(got.value)
    assert check_row_parts([a, a[:1]], "x") == 256


def test_prepare_parts_without_the_kernel_concatenates():
    a = torch.randn(3, 256, dtype=torch.bfloat16)
    assert torch.equal(fl.prepare_parts([a, a[:1]], torch.randn(64, 256)), torch.cat([a, a[:1]]))
    assert fl.prepare_parts([a], torch.randn(64, 256)) is a
