"""model.checkpoint as a user meets it: the spec from config.json, refusals naming file/key/value, bad
checkpoints found when the config is read (exit 2, one line, no traceback), `dwdp verify` on a
save_pretrained checkpoint, and num_layers truncation reading only the layers it keeps."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

transformers = pytest.importorskip("transformers", reason="checkpoint tests build HF checkpoints (pip install -e .[dev])")

sys.path.insert(0, str(Path(__file__).parent))
from hf_tiny import FAMILIES, make_checkpoint  # noqa: E402

from dwdp_trtllm.cli import main  # noqa: E402
from dwdp_trtllm.spec.config import ModelConfig  # noqa: E402
from dwdp_trtllm.spec.hf_config import spec_from_hf_config  # noqa: E402
from dwdp_trtllm.spec.models import get_model  # noqa: E402
from dwdp_trtllm.spec.schema import ConfigError  # noqa: E402


@pytest.fixture(scope="module")
def ds_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("ds")
    make_checkpoint("deepseek_v3", d, seed=5)
    return d


def _config_json(tmp_path: Path, family: str, **changes) -> Path:
    cls_name, kwargs = FAMILIES[family]
    getattr(transformers, cls_name)(**kwargs).save_pretrained(str(tmp_path))
    data = json.loads((tmp_path / "config.json").read_text())
    data.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("family,key,value,expect", [
    ("qwen3_moe", "use_sliding_window", True, "full causal"),
    ("qwen3_moe", "mlp_only_layers", [0], "every layer is MoE"),
    ("qwen3_moe", "decoder_sparse_step", 2, "every layer is MoE"),
    ("qwen3_moe", "attention_bias", True, "no bias"),
    ("qwen3_moe", "rope_parameters", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                      "rope_theta": 1e6}, "MLA families"),
    ("mixtral", "sliding_window", 4096, "full causal"),
    ("mixtral", "hidden_act", "gelu", "SwiGLU"),
    ("olmoe", "clip_qkv", 8.0, "not clipped"),
    ("deepseek_v3", "rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4}, "'default' and 'yarn'"),
    ("deepseek_v3", "rope_parameters", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                        "rope_theta": 1e4, "low_freq_factor": 1.0}, "not a yarn key"),
    ("deepseek_v3", "topk_method", "group_limited_greedy", "router of this family"),
    ("deepseek_v3", "some_future_key", 3, "does not map"),
    ("deepseek_v3", "quantization_config", {"quant_method": "awq"}, "block FP8"),
    ("deepseek_v3", "model_type", "qwen2_moe", "supported: deepseek_v3"),
])
def test_unmappable_config_keys_are_refused_naming_file_key_value(tmp_path, family, key, value, expect):
    _config_json(tmp_path, family, **{key: value})
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "config.json") in msg and key in msg and expect in msg, msg
    if not isinstance(value, dict):
        assert repr(value) in msg, msg


#: DeepSeek-V3's config.json as released (also read by test_hf_config_cache)
DEEPSEEK_V3_RELEASE = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "first_k_dense_replace": 3,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "vocab_size": 129280,
    "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 8, "topk_group": 4,
    "norm_topk_prob": True, "routed_scaling_factor": 2.5, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_layer_freq": 1, "hidden_act": "silu",
    "attention_bias": False, "attention_dropout": 0.0, "max_position_embeddings": 163840, "ep_size": 1,
    "num_nextn_predict_layers": 1, "aux_loss_alpha": 0.001, "seq_aux": True, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "transformers_version": "4.46.3", "use_cache": True, "bos_token_id": 0,
    "eos_token_id": 1, "initializer_range": 0.02, "pretraining_tp": 1,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}
}


def test_release_style_config_maps_to_the_preset(tmp_path):
    """DeepSeek-V3's config.json as released (rope_scaling + rope_theta, FP8 quantization_config) gives the preset,
    MTP layer included (num_nextn_predict_layers 1: the preset carries it; memory.py prices it for TensorRT-LLM
    servers)."""
    cfg = DEEPSEEK_V3_RELEASE
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = spec_from_hf_config(tmp_path, name="deepseek-v3")
    assert spec.mtp_layers == 1 and spec == get_model("deepseek-v3")


def _yaml(tmp_path: Path, checkpoint, **model) -> Path:
    f = tmp_path / "cfg.yaml"
    f.write_text(yaml.safe_dump({"model": {"checkpoint": checkpoint, **model},
                                 "dwdp": {"dwdp_size": 2, "weight_dtype": "float32"},
                                 "workload": {"isl": 12, "requests_per_rank": 1, "max_num_tokens": 16},
                                 "run": {"ranks": 2, "warmup_iters": 0, "timeout_s": 240}}))
    return f


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _nan_expert(d: Path) -> None:
    from safetensors.torch import load_file, save_file
    t = load_file(str(d / "model.safetensors"))
    t["model.layers.2.mlp.experts.3.up_proj.weight"][1, 2] = float("nan")
    save_file(t, str(d / "model.safetensors"))


def _int_expert(d: Path) -> None:
    from safetensors.torch import load_file, save_file
    t = load_file(str(d / "model.safetensors"))
    t["model.layers.1.mlp.experts.0.down_proj.weight"] = torch.randint(-8, 8, t["model.layers.1.mlp.experts.0.down_proj.weight"].shape,
                                                                        dtype=torch.int32)
    save_file(t, str(d / "model.safetensors"))


def _truncate(d: Path) -> None:
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])


#: case -> (make the bad checkpoint from a good copy; returns the model.checkpoint value, text the error must hold)
BAD = {
    "file_not_dir": (lambda d: str(d / "model.safetensors"), "is a file"),
    "empty_string": (lambda d: "", "empty string"),
    "missing": (lambda d: str(d / "nope"), "does not exist"),
    "truncated": (lambda d: (_truncate(d), str(d))[1], "model.safetensors: not a readable safetensors file"),
    "garbage": (lambda d: ((d / "model.safetensors").write_bytes(b"\x07garbage" * 99), str(d))[1],
                "model.safetensors: not a readable safetensors file"),
    "index_not_json": (lambda d: ((d / "model.safetensors.index.json").write_text("{weight_map: "), str(d))[1],
                       "model.safetensors.index.json: not valid JSON"),
    "index_no_weight_map": (lambda d: ((d / "model.safetensors.index.json").write_text('{"metadata": {}}'), str(d))[1],
                            "model.safetensors.index.json: expected a JSON object with a 'weight_map'"),
    "no_config_json": (lambda d: ((d / "config.json").unlink(), str(d))[1], "config.json not found"),
    "bad_config_json": (lambda d: ((d / "config.json").write_text("{]"), str(d))[1], "config.json: not valid JSON"),
    "integer_expert": (lambda d: (_int_expert(d), str(d))[1], "'model.layers.1.mlp.experts.0.down_proj.weight' has dtype I32"),
    "nan_expert": (lambda d: (_nan_expert(d), str(d))[1], "'model.layers.2.mlp.experts.3.up_proj.weight' holds NaN"),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_checkpoints_exit_2_naming_file_and_key(tmp_path, ds_ckpt, capsys, case):
    make, expect = BAD[case]
    value = make(_copy(ds_ckpt, tmp_path / "ckpt"))
    code = main(["verify", str(_yaml(tmp_path, value))])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert "Traceback" not in text
    err = [ln for ln in out.err.splitlines() if ln.strip()]
    assert len(err) == 1 and "model.checkpoint" in err[0] and expect in err[0], err


def test_a_bad_checkpoint_given_by_set_blames_set(tmp_path, ds_ckpt, capsys):
    """The header checks run when the points are loaded (bench/sweep.py), not in ModelConfig: a truncated
    checkpoint named by --set is one line naming --set and model.checkpoint, exit 2, no rank started."""
    bad = _copy(ds_ckpt, tmp_path / "bad")
    _truncate(bad)
    code = main(["verify", str(_yaml(tmp_path, str(ds_ckpt))), "--set", f"model.checkpoint={bad}"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1, err
    assert "--set" in err[0] and "model.checkpoint" in err[0] and "not a readable safetensors file" in err[0], err
    ModelConfig(checkpoint=str(bad))  # reading the config alone opens no tensor file (the core reads config.json)


def test_preset_given_with_a_checkpoint_is_checked(ds_ckpt):
    with pytest.raises(ConfigError, match=r"^preset: preset 'tiny' has num_layers=4 but .*config.json gives 3"):
        ModelConfig(preset="tiny", checkpoint=str(ds_ckpt))


@pytest.mark.slow  # dwdp verify with ranks, twice: ~19 s on 2 cores
@pytest.mark.timeout(900)
def test_dwdp_verify_on_a_save_pretrained_checkpoint(tmp_path, ds_ckpt, capsys):
    code = main(["verify", str(_yaml(tmp_path, str(ds_ckpt))), "--set", "workload.isl=40", "--set",
                 "workload.max_num_tokens=32"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = {c[0]: c for c in (ln.split() for ln in out.splitlines()) if len(c) == 7 and c[0] in ("dep", "dwdp")}
    assert set(rows) == {"dep", "dwdp"}, out
    for mode, cols in rows.items():  # mode, hidden abs, hidden rel, logits abs, logits rel, top-1, verdict
        assert float(cols[2]) <= 1e-4 and float(cols[4]) <= 1e-4 and cols[5] == "100.00%" and cols[6] == "ok", out
    print(out)  # docs/BENCHMARKS.md quotes this
    worst = max(float(c[2]) for c in rows.values())
    if worst > 0:  # a tolerance below the measured error fails the command
        code = main(["verify", str(_yaml(tmp_path, str(ds_ckpt))), "--set", "workload.isl=40", "--set",
                     "workload.max_num_tokens=32", "--tol", f"{worst / 2:g}"])
        out = capsys.readouterr().out
        assert code == 1 and "OVER tolerance" in out and "FAILED" in out, out


def test_num_layers_reads_only_the_layers_kept(tmp_path, ds_ckpt):
    """A checkpoint whose last layer is absent still loads with num_layers=2: layer 2 is never read."""
    from safetensors.torch import load_file, save_file

    from dwdp_trtllm.engine.checkpoint_check import check_checkpoint
    from dwdp_trtllm.engine.loader import load_checkpoint
    d = _copy(ds_ckpt, tmp_path / "ckpt")
    t = load_file(str(d / "model.safetensors"))
    save_file({k: v for k, v in t.items() if not k.startswith("model.layers.2.")}, str(d / "model.safetensors"))
    with pytest.raises(ConfigError, match=r"model\.layers\.2\..*not found"):
        check_checkpoint(d, ModelConfig(checkpoint=str(d)).spec())
    cfg = ModelConfig(checkpoint=str(d), num_layers=2)
    spec = cfg.spec()
    check_checkpoint(d, spec)
    assert spec.num_layers == 2 and spec.moe_layer_ids == (1,)
    dense, loader = load_checkpoint(d, spec, dtype=torch.float32, device="cpu")
    assert not any(k.startswith("model.layers.2.") for k in dense)
    w13, w2 = loader(1, 7)
    assert torch.equal(w2, t["model.layers.1.mlp.experts.7.down_proj.weight"])
