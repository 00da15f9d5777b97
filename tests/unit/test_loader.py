"""HF safetensors checkpoints: round trip through our seeded weights, names per family, errors."""
import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from dwdp_trtllm.engine.loader import hf_expert_names, load_checkpoint, save_checkpoint
from dwdp_trtllm.engine.local_experts import LocalExperts
from dwdp_trtllm.engine.model import MoETransformer, build_reference_model
from dwdp_trtllm.engine.records import Segment
from dwdp_trtllm.engine.weights import dequantize_fp8_blockwise, init_dense_weights, init_expert, quantize_fp8_blockwise
from dwdp_trtllm.spec.models import get_model



def _save_seeded(path, spec, seed, num_files=1):
    dense = init_dense_weights(spec, seed, torch.float32, "cpu")
    save_checkpoint(path, spec, dense, lambda l, e: init_expert(spec, l, e, seed, torch.float32, "cpu"), num_files=num_files)


@pytest.mark.parametrize("name,num_files", [("tiny", 1), ("tiny", 3), ("tiny-gqa", 2)])
def test_round_trip_model_output_identical(tmp_path, name, num_files):
    spec = get_model(name)
    _save_seeded(tmp_path, spec, seed=4, num_files=num_files)
    assert (tmp_path / "model.safetensors.index.json").exists() == (num_files > 1)
    dense, expert_loader = load_checkpoint(tmp_path, spec, dtype=torch.float32, device="cpu")
    w13, w2 = expert_loader(spec.moe_layer_ids[-1], 3)
    ref13, ref2 = init_expert(spec, spec.moe_layer_ids[-1], 3, 4, torch.float32, "cpu")
    assert torch.equal(w13, ref13) and torch.equal(w2, ref2)
    model = MoETransformer(spec, dense, LocalExperts.from_loader(spec, expert_loader, "float32", "cpu"),
                           device="cpu", dtype=torch.float32)
    ref = build_reference_model(spec, seed=4, dtype=torch.float32, device="cpu")
    ids = torch.randint(0, spec.vocab_size, (19,), generator=torch.Generator().manual_seed(0))
    seg = [Segment(0, 0, 19, True)]
    assert torch.equal(model.forward(ids, seg), ref.forward(ids, seg))


def test_mixtral_names(tmp_path):
    spec = dataclasses.replace(get_model("tiny-gqa"), name="tiny-mixtral", family="mixtral", qk_norm=False)
    _save_seeded(tmp_path, spec, seed=2)
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "model.layers.0.block_sparse_moe.gate.weight" in keys and "model.layers.0.mlp.gate.weight" not in keys
    assert set(hf_expert_names(spec, 1, 5)) <= keys and hf_expert_names(spec, 1, 5)[0].endswith("experts.5.w1.weight")
    dense, expert_loader = load_checkpoint(tmp_path, spec, dtype=torch.bfloat16, device="cpu")
    assert dense["model.layers.0.mlp.gate.weight"].dtype == torch.bfloat16
    assert dense["model.layers.0.input_layernorm.weight"].dtype == torch.float32
    assert torch.equal(expert_loader(2, 11)[1], init_expert(spec, 2, 11, 2, torch.bfloat16, "cpu")[1])


def test_missing_and_misshaped_tensors_are_named(tmp_path):
    spec = get_model("tiny")
    _save_seeded(tmp_path, spec, seed=1)
    f = tmp_path / "model.safetensors"
    tensors = load_file(str(f))
    bad = "model.layers.2.self_attn.kv_b_proj.weight"
    tensors[bad] = tensors[bad][:, :-1].contiguous()
    del tensors["model.layers.1.mlp.experts.4.up_proj.weight"]
    save_file(tensors, str(f))
    with pytest.raises(ValueError, match=rf"{bad}.*model.safetensors.*expected \(128, 32\)"):
        load_checkpoint(tmp_path, spec, dtype=torch.float32, device="cpu")
    tensors[bad] = torch.randn(128, 32)
    save_file(tensors, str(f))
    _, expert_loader = load_checkpoint(tmp_path, spec, dtype=torch.float32, device="cpu")
    expert_loader(1, 3)  # present
    with pytest.raises(KeyError, match=r"experts\.4\.up_proj\.weight.*expected shape \(32, 64\)"):
        expert_loader(1, 4)
    with pytest.raises(ValueError, match="not a routed expert"):
        expert_loader(0, 0)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_checkpoint(empty, spec, dtype=torch.float32, device="cpu")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint(tmp_path / "absent", spec, dtype=torch.float32, device="cpu")


def test_fp8_scale_inv_dequantised_on_load(tmp_path):
    spec = get_model("tiny")
    _save_seeded(tmp_path, spec, seed=1, num_files=2)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    name = "model.layers.1.mlp.experts.0.down_proj.weight"
    fname = index["weight_map"][name]
    tensors = load_file(str(tmp_path / fname))
    q, s = quantize_fp8_blockwise(tensors[name])
    tensors[name], tensors[name + "_scale_inv"] = q, s
    save_file(tensors, str(tmp_path / fname))
    index["weight_map"][name + "_scale_inv"] = fname
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    _, expert_loader = load_checkpoint(tmp_path, spec, dtype=torch.float32, device="cpu")
    assert torch.equal(expert_loader(1, 0)[1], dequantize_fp8_blockwise(q, s))
