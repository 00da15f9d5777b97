"""Dims-only ModelSpecs from config.json (model_dims.py) and `dwdp plan --model config.json --gpu-spec FILE`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.spec.model_dims import dims_from_config, dims_from_config_json, dims_only_reason, weight_dtype_of
from dwdp_trtllm.spec.models import PRESETS
from dwdp_trtllm.spec.schema import ConfigError

DATA = Path(__file__).resolve().parents[2] / "dwdp_trtllm" / "data"
GPT_OSS = DATA / "models" / "gpt-oss-120b.json"
GLM = DATA / "models" / "glm-4.5.json"

# DeepSeek-V3 / R1 release config.json, the keys that set dimensions (huggingface.co/deepseek-ai/DeepSeek-V3)
DSV3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "num_attention_heads": 128, "num_key_value_heads": 128,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 129280, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
        "scoring_func": "sigmoid", "rope_scaling": {"type": "yarn", "factor": 40}}


def test_deepseek_dims_match_the_preset():
    s, p = dims_from_config(DSV3, "dsv3/config.json", "dsv3"), PRESETS["deepseek-v3"]
    for f in ("hidden_size", "num_layers", "first_k_dense", "dense_intermediate", "moe_intermediate", "num_experts",
              "top_k", "num_shared_experts", "attention", "num_heads", "q_lora_rank", "kv_lora_rank", "v_head_dim"):
        assert getattr(s, f) == getattr(p, f), f
    assert s.family == "deepseek" and dims_only_reason(s) is None
    assert s.expert_bytes("fp8") == p.expert_bytes("fp8") and s.attention_params() == p.attention_params()
    assert weight_dtype_of(DSV3) == "fp8"


def test_gpt_oss_dims_only():
    s = dims_from_config_json(GPT_OSS)
    assert (s.family, s.attention, s.hidden_size, s.moe_intermediate, s.num_experts, s.top_k) == (
        "gpt_oss", "gqa", 2880, 2880, 128, 4)
    assert (s.num_heads, s.num_kv_heads, s.head_dim, s.first_k_dense, s.num_moe_layers) == (64, 8, 64, 0, 36)
    assert "gpt_oss" in dims_only_reason(s)
    assert weight_dtype_of(json.loads(GPT_OSS.read_text())) == "mxfp4"
    # MXFP4: 4-bit elements + one E8M0 byte per 32 along `in` (weight_formats.py): 4.25 bits per weight
    assert s.expert_bytes("mxfp4") == pytest.approx(s.expert_params * 4.25 / 8)


def test_glm4_moe_dims_only():
    s = dims_from_config_json(GLM)
    assert (s.family, s.first_k_dense, s.num_experts, s.top_k, s.num_shared_experts, s.moe_intermediate) == (
        "glm4_moe", 3, 160, 8, 1, 1536)
    assert s.head_dim == 128 and s.num_kv_heads == 8 and dims_only_reason(s)


def test_directory_and_qwen_dense_prefix(tmp_path):
    cfg = {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
           "num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "mlp_only_layers": [0, 1]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    s = dims_from_config_json(tmp_path)
    assert s.first_k_dense == 2 and s.family == "qwen3_moe"
    cfg["mlp_only_layers"] = [3]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        dims_from_config_json(tmp_path)


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.pop("hidden_size"), "hidden_size"),
    (lambda d: d.pop("n_routed_experts"), "n_routed_experts"),
    (lambda d: d.update(num_experts_per_tok=0), "num_experts_per_tok"),
    (lambda d: d.update(num_experts_per_tok=300), "num_experts_per_tok"),
    (lambda d: d.update(hidden_size="big"), "hidden_size"),
    (lambda d: d.update(kv_lora_rank=512, qk_rope_head_dim=None), "qk_rope_head_dim"),
])
def test_bad_dims_name_file_and_key(edit, key):
    d = dict(DSV3)
    edit(d)
    with pytest.raises(ConfigError) as e:
        dims_from_config(d, "x/config.json")
    assert e.value.file == "x/config.json" and e.value.key == key


def test_plan_takes_config_json_and_gpu_spec(capsys):
    assert main(["plan", "--model", str(GLM), "--gpu-spec", str(DATA / "gpus" / "b200.yaml"), "--weight-dtype", "nvfp4",
                 "--dwdp-size", "8", "--isl", "8192", "--mnt", "16384", "--no-bench-results", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 1 and rows[0]["dwdp_size"] == 8 and rows[0]["t_prefetch_us"] > 0
    # the same plan from the shipped name: --gpu-spec of the shipped file is the same GPU
    assert main(["plan", "--model", str(GLM), "--gpu", "b200", "--weight-dtype", "nvfp4", "--dwdp-size", "8",
                 "--isl", "8192", "--mnt", "16384", "--no-bench-results", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == rows


def test_plan_bad_model_and_gpu_spec_exit_2(tmp_path, capsys):
    assert main(["plan", "--model", str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err
    bad = tmp_path / "gpu.yaml"
    bad.write_text("name: x\nmemory_gb: 80\n")
    assert main(["plan", "--gpu-spec", str(bad), "--no-bench-results"]) == 2
    err = capsys.readouterr().err
    assert "gpu.yaml" in err and "dense_tflops" in err


@pytest.mark.parametrize("key, value, expect", [
    ("rope_theta", float("nan"), "expected a finite number in [0.001, 1e+12], got nan"),  # was planned, exit 0
    ("rms_norm_eps", float("inf"), "got inf"),
    ("n_routed_experts", 10 ** 12, "expected an integer in [1, 65,536], got 1000000000000"),  # was named num_experts
    ("n_routed_experts", 1e12, "expected an integer in [1, 65,536], got 1000000000000.0"),
    ("hidden_size", -64, "expected an integer in [1, 131,072], got -64"),
    ("vocab_size", 1 << 30, "expected an integer in [1, 4,194,304]"),
    ("experts_per_token", 0, "expected an integer in [1, 1,024], got 0"),  # gpt-oss's name for top_k
])
def test_plan_config_json_out_of_bounds_names_file_and_key_exit_2(tmp_path, capsys, key, value, expect):
    """`dwdp plan --model bad/config.json`: every value checked against models.FIELD_BOUNDS (the list hf_config.py
    and ModelSpec use), the file and the config.json key named in one line, exit 2."""
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({**DSV3, key: value}))  # NaN / Infinity as Python's json writes and reads them
    assert main(["plan", "--model", str(bad), "--gpu", "h200", "--dwdp-size", "8", "--isl", "8192", "--mnt", "16384",
                 "--no-bench-results", "--json"]) == 2
    cap = capsys.readouterr()
    assert not cap.out.strip()
    err = cap.err.strip()
    assert str(bad) in err and key in err and expect in err and len(err.splitlines()) == 1, err
    with pytest.raises(ConfigError) as e:
        dims_from_config_json(bad)
    assert e.value.key == key and e.value.file == str(bad)


def test_rope_parameters_theta_is_bounded_too(tmp_path):
    d = {**DSV3, "rope_parameters": {"rope_theta": float("nan"), "rope_type": "default"}}
    with pytest.raises(ConfigError) as e:
        dims_from_config(d, "x/config.json")
    assert e.value.key == "rope_parameters.rope_theta" and "got nan" in str(e.value)
