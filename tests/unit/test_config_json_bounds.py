"""config.json values bounded like YAML keys (issue 22): one list (models.FIELD_BOUNDS) for every ModelSpec, the
config.json key and file named when a checkpoint's value breaks it; exit 2 in one line before any rank starts."""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

transformers = pytest.importorskip("transformers", reason="builds HF config.json files (pip install -e .[dev])")

sys.path.insert(0, str(Path(__file__).parent))
from hf_tiny import FAMILIES  # noqa: E402

from dwdp_trtllm.spec.hf_config import spec_from_hf_config  # noqa: E402
from dwdp_trtllm.spec.json_values import JSON_FIELDS  # noqa: E402
from dwdp_trtllm.spec.models import FIELD_BOUNDS, ModelSpec, get_model  # noqa: E402
from dwdp_trtllm.spec.schema import ConfigError  # noqa: E402


def _config_json(tmp_path: Path, family: str, **changes) -> Path:
    cls_name, kwargs = FAMILIES[family]
    getattr(transformers, cls_name)(**kwargs).save_pretrained(str(tmp_path))
    f = tmp_path / "config.json"
    data = json.loads(f.read_text())
    for k, v in changes.items():
        if k == "rope_theta" and isinstance(data.get("rope_parameters"), dict) and "rope_theta" in data["rope_parameters"]:
            data["rope_parameters"]["rope_theta"] = v  # transformers >= 5 keeps it there
        else:
            data[k] = v
    f.write_text(json.dumps(data))  # NaN / Infinity as Python's json writes (and reads) them
    return tmp_path


@pytest.mark.parametrize("family,key,value,expect", [
    ("deepseek_v3", "n_routed_experts", 10 ** 12, "expected an integer in [1, 65,536], got 1000000000000"),
    ("deepseek_v3", "n_routed_experts", 1e12, "expected an integer in [1, 65,536], got 1000000000000.0"),
    ("deepseek_v3", "rope_theta", float("nan"), "expected a finite number in [0.001, 1e+12], got nan"),
    ("deepseek_v3", "rope_theta", float("inf"), "got inf"),
    ("deepseek_v3", "hidden_size", -64, "expected an integer in [1, 131,072], got -64"),
    ("deepseek_v3", "rms_norm_eps", float("nan"), "got nan"),
    ("deepseek_v3", "routed_scaling_factor", -1.0, "got -1.0"),
    ("deepseek_v3", "vocab_size", 0, "got 0"),
    ("qwen3_moe", "num_experts", 10 ** 9, "got 1000000000"),
    ("qwen3_moe", "moe_intermediate_size", -8, "got -8"),
    ("qwen3_moe", "num_key_value_heads", 0, "got 0"),
    ("mixtral", "intermediate_size", 1 << 30, "got 1073741824"),
    ("olmoe", "num_hidden_layers", 100_000, "expected an integer in [1, 1,024]"),
])
def test_config_json_values_out_of_bounds_name_file_and_key(tmp_path, family, key, value, expect):
    _config_json(tmp_path, family, **{key: value})
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "config.json") in msg and key in msg and expect in msg, msg


def test_yarn_numbers_must_be_finite(tmp_path):
    rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 1e4,
            "beta_fast": float("nan")}
    _config_json(tmp_path, "deepseek_v3", rope_parameters=rope, rope_scaling=None)
    with pytest.raises(ConfigError, match=r"rope_parameters\.beta_fast: expected a finite number"):
        spec_from_hf_config(tmp_path)


def test_one_list_for_presets_yaml_specs_and_config_json():
    """Every config.json key maps to a bounded field, and ModelSpec itself refuses the same values."""
    assert set(JSON_FIELDS.values()) <= set(FIELD_BOUNDS)
    base = get_model("tiny")
    for field, bad in (("hidden_size", -64), ("num_experts", 10 ** 12), ("rope_theta", math.nan), ("rms_eps", 0.0)):
        with pytest.raises(ValueError, match=f"{field}: expected"):
            dataclasses.replace(base, **{field: bad})
    for name in ("deepseek-r1", "deepseek-v2-lite", "qwen3-30b-a3b", "mixtral-8x7b", "olmoe-1b-7b", "tiny"):
        get_model(name)  # every preset is within bounds


def test_a_nan_rope_theta_checkpoint_exits_2_before_any_rank(tmp_path, capsys, monkeypatch):
    from dwdp_trtllm.bench import runner
    from dwdp_trtllm.cli import main

    # "before any rank" is an event, not a time (a 30 s bound on this call went red on a loaded machine)
    monkeypatch.setattr(runner, "engine_run_mode", lambda: pytest.fail("a rank was started"))

    ckpt = _config_json(tmp_path / "ckpt", "deepseek_v3", rope_theta=float("nan"))
    cfg = tmp_path / "b.yaml"
    cfg.write_text(yaml.safe_dump({"model": {"checkpoint": str(ckpt)}, "dwdp": {"dwdp_size": 2},
                                   "run": {"ranks": 2, "device": "cpu"}}))
    assert main(["bench", str(cfg), "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "rope_theta" in err and "got nan" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


_YARN_NO_FACTOR = {"rope_type": "yarn", "original_max_position_embeddings": 64, "rope_theta": 1e4}
_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}


#: (family, changes, key, expected text, refused by the planner's dims-only reader too); the planner refuses every wrong
#: type, not what only the engine lacks (a block size it does not implement, a yarn factor it does not compute)
WRONG_TYPES = [
    ("deepseek_v3", dict(rope_parameters=_YARN_NO_FACTOR, rope_scaling=None, max_position_embeddings="4096"),
     "max_position_embeddings", "expected an integer in [1, 16,777,216], got '4096'", True),
    ("deepseek_v3", dict(rope_parameters=_YARN_NO_FACTOR, rope_scaling=None, max_position_embeddings=None),
     "max_position_embeddings", "when rope_parameters.factor is absent (yarn's factor = max_position_embeddings / ", False),
    ("deepseek_v3", dict(rope_parameters={**_YARN_NO_FACTOR, "factor": 4.0, "truncate": "no"}, rope_scaling=None),
     "rope_parameters.truncate", "expected true or false, got 'no'", True),
    ("deepseek_v3", dict(quantization_config={**_FP8, "weight_block_size": 128}),
     "quantization_config.weight_block_size", "expected a list of 2 integers in [1, 65,536], got 128", True),
    ("deepseek_v3", dict(quantization_config={**_FP8, "weight_block_size": None}),
     "quantization_config.weight_block_size", "value None is not supported: expected [128, 128]", False),
    ("deepseek_v3", dict(quantization_config={**_FP8, "weight_block_size": [64, 64]}),
     "quantization_config.weight_block_size", "value [64, 64] is not supported: expected [128, 128]", False),
    ("olmoe", dict(num_attention_heads="8"), "num_attention_heads", "expected an integer in [1, 1,024], got '8'", True),
    ("qwen3_moe", dict(norm_topk_prob="false"), "norm_topk_prob", "expected true or false, got 'false'", True),
]


@pytest.mark.parametrize("family,changes,key,expect,planner", WRONG_TYPES)
def test_config_json_values_of_the_wrong_type_name_file_key_value_and_expectation(tmp_path, family, changes, key,
                                                                                   expect, planner):
    """Wrong types were TypeErrors in the family readers (or, for truncate: "no", read as true): one typed reader
    (json_values.KEYS) refuses them for the engine (hf_config) and the planner (model_dims) alike."""
    from dwdp_trtllm.spec.model_dims import dims_from_config_json

    _config_json(tmp_path, family, **changes)
    for read in (spec_from_hf_config, dims_from_config_json) if planner else (spec_from_hf_config,):
        with pytest.raises(ConfigError) as e:
            read(tmp_path)
        msg = str(e.value)
        assert msg.startswith(f"{tmp_path / 'config.json'}: {key}: ") and expect in msg, msg


def test_a_bool_truncate_is_read_as_given(tmp_path):
    _config_json(tmp_path, "deepseek_v3", rope_parameters={**_YARN_NO_FACTOR, "factor": 4.0, "truncate": False},
                 rope_scaling=None)
    assert spec_from_hf_config(tmp_path).rope_scaling.truncate is False


@pytest.mark.parametrize("depth,expect", [(100_000, "nested deeper than Python's JSON reader allows"),
                                          (40, "nested more than 32 levels deep")])
def test_deeply_nested_json_is_one_error_naming_the_file(tmp_path, depth, expect):
    from dwdp_trtllm.engine.loader import INDEX_NAME, read_index
    from dwdp_trtllm.spec.model_dims import dims_from_config_json

    deep = "[" * depth + "]" * depth
    (tmp_path / "config.json").write_text('{"model_type": "deepseek_v3", "hidden_size": ' + deep + "}")
    for read in (spec_from_hf_config, dims_from_config_json):
        with pytest.raises(ConfigError) as e:
            read(tmp_path)
        assert str(e.value).startswith(f"{tmp_path / 'config.json'}: <root>: {expect}"), str(e.value)[:300]
    (tmp_path / INDEX_NAME).write_text('{"weight_map": {"a": ' + deep + "}}")
    with pytest.raises(ConfigError) as e:
        read_index(tmp_path)
    assert str(e.value).startswith(f"model.checkpoint: {tmp_path / INDEX_NAME}: {expect}"), str(e.value)[:300]


def test_a_wrong_type_in_config_json_exits_2_in_one_line_from_plan(tmp_path, capsys):
    from dwdp_trtllm.cli import main

    _config_json(tmp_path / "ckpt", "deepseek_v3", quantization_config={**_FP8, "weight_block_size": 128})
    assert main(["plan", "--model", str(tmp_path / "ckpt"), "--gpu", "h200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "quantization_config.weight_block_size" in err[0] and "got 128" in err[0], err
