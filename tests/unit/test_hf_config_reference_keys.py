"""config.json keys whose meaning comes from transformers' reference implementation (issue 23): `layer_types`
of full attention is accepted, other kinds refused naming the layer; DeepSeek-V2 follows its reference, which
reads neither `norm_topk_prob` nor `rope_interleave`."""
from __future__ import annotations

import inspect
import json

import pytest

from dwdp_trtllm.spec.hf_config import spec_from_hf_config
from dwdp_trtllm.spec.schema import ConfigError

transformers = pytest.importorskip("transformers")  # the [dev] extra: the reference the checks below read

_DS = dict(model_type="deepseek_v2", vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=24,
           num_hidden_layers=3, num_attention_heads=4, n_routed_experts=8, num_experts_per_tok=3,
           first_k_dense_replace=1, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12,
           n_shared_experts=2, topk_method="greedy", routed_scaling_factor=1.5, rms_norm_eps=1e-6)
_QWEN = dict(model_type="qwen3_moe", vocab_size=96, hidden_size=64, intermediate_size=80, moe_intermediate_size=24,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
             num_experts_per_tok=3, norm_topk_prob=True, rms_norm_eps=1e-5)


def _write(tmp_path, data):
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


def test_deepseek_v2_reference_reads_neither_key():
    """What the engine follows: transformers' DeepSeek-V2 forward names neither key (if it ever does, this fails
    and hf_config.py must map them again)."""
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as ref
    src = inspect.getsource(ref)
    assert "norm_topk_prob" not in src and "rope_interleave" not in src
    assert "view_as_complex" in inspect.getsource(ref.apply_rotary_emb)  # pairs (2i, 2i+1): interleaved


@pytest.mark.parametrize("norm,interleave", [(True, False), (False, True), (None, None)])
def test_deepseek_v2_follows_its_reference_whatever_the_keys_say(tmp_path, norm, interleave):
    data = dict(_DS, **({} if norm is None else {"norm_topk_prob": norm, "rope_interleave": interleave}))
    spec = spec_from_hf_config(_write(tmp_path, data))
    assert spec.norm_topk_prob is False and spec.rope_interleave is True


def test_deepseek_v3_still_honours_both_keys(tmp_path):
    data = dict(_DS, model_type="deepseek_v3", topk_method="noaux_tc", q_lora_rank=24, n_group=4, topk_group=2,
                norm_topk_prob=False, rope_interleave=False)
    spec = spec_from_hf_config(_write(tmp_path, data))
    assert spec.norm_topk_prob is False and spec.rope_interleave is False


def test_layer_types_of_full_attention_is_accepted(tmp_path):
    spec = spec_from_hf_config(_write(tmp_path, dict(_QWEN, layer_types=["full_attention"] * 2)))
    assert spec.num_layers == 2


@pytest.mark.parametrize("value,expect", [
    (["full_attention", "sliding_attention"], "layer 1 is 'sliding_attention'"),
    (["full_attention"], "a list of 2 entries"),
    ("full_attention", "a list of 2 entries"),
])
def test_other_layer_types_are_refused_naming_the_layer(tmp_path, value, expect):
    with pytest.raises(ConfigError) as e:
        spec_from_hf_config(_write(tmp_path, dict(_QWEN, layer_types=value)))
    msg = str(e.value)
    assert "config.json" in msg and "layer_types" in msg and expect in msg, msg
