"""engine/rope.py against transformers' rope utilities: frequencies, cos/sin factor, MLA softmax scale."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dwdp_trtllm.engine.rope import attention_factor, inv_freq, rope_cos_sin, softmax_scale_factor
from dwdp_trtllm.spec.models import YarnScaling, get_model

transformers = pytest.importorskip("transformers", reason="rope reference tests need transformers (pip install -e .[dev])")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale  # noqa: E402

CASES = [  # (factor, mscale, mscale_all_dim, original, beta_fast, beta_slow, rope_dim, theta)
    (40.0, 1.0, 1.0, 4096, 32.0, 1.0, 64, 10000.0),  # DeepSeek-V3/R1 release
    (40.0, 0.707, 0.707, 4096, 32.0, 1.0, 64, 10000.0),  # DeepSeek-V2-Lite
    (8.0, 1.0, 0.0, 256, 16.0, 2.0, 16, 50000.0),  # mscale_all_dim 0: no softmax factor, cos/sin get mscale(8)
    (4.0, 0.8, 1.0, 64, 32.0, 1.0, 8, 10000.0),  # attention factor != 1
]


@pytest.mark.parametrize("factor,mscale,mscale_all_dim,orig,bf,bs,dim,theta", CASES)
def test_yarn_matches_transformers(factor, mscale, mscale_all_dim, orig, bf, bs, dim, theta):
    y = YarnScaling(factor=factor, original_max_position_embeddings=orig, beta_fast=bf, beta_slow=bs,
                    mscale=mscale, mscale_all_dim=mscale_all_dim)
    spec = dataclasses.replace(get_model("deepseek-v3"), qk_rope_head_dim=dim, rope_theta=theta, rope_scaling=y)
    params = {"rope_type": "yarn", "rope_theta": theta, "factor": factor, "mscale": mscale, "mscale_all_dim": mscale_all_dim,
              "original_max_position_embeddings": orig, "beta_fast": bf, "beta_slow": bs}
    cfg = transformers.DeepseekV3Config(qk_rope_head_dim=dim, rope_parameters=params, max_position_embeddings=orig * 40)
    ref_inv, ref_af = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    assert torch.equal(inv_freq(spec, torch.device("cpu")), ref_inv)
    assert attention_factor(spec) == ref_af
    base = 1 / math.sqrt(spec.qk_nope_head_dim + dim)
    assert base * softmax_scale_factor(spec) == pytest.approx(yarn_apply_mscale(cfg.rope_parameters, base), rel=1e-15)
    # cos/sin at random positions: HF's rotary embedding forward, bit for bit (fp32)
    pos = torch.randint(0, orig * 8, (33,), generator=torch.Generator().manual_seed(0))
    emb = transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3RotaryEmbedding(cfg)
    cos_ref, sin_ref = emb(torch.zeros(1, dtype=torch.float32), pos[None])
    cos, sin = rope_cos_sin(pos, spec)
    assert torch.equal(cos, cos_ref[0, :, : dim // 2]) and torch.equal(sin, sin_ref[0, :, : dim // 2])


def test_release_preset_numbers():
    spec = get_model("deepseek-r1")
    assert spec.rope_scaling == YarnScaling(factor=40.0, original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=1.0)
    assert softmax_scale_factor(spec) == pytest.approx((0.1 * math.log(40) + 1) ** 2)  # 1.3689
    assert attention_factor(spec) == 1.0
    assert softmax_scale_factor(get_model("qwen3-30b-a3b")) == 1.0 and attention_factor(get_model("tiny")) == 1.0
    # plain rope: HF's default expression
    tiny = get_model("tiny")
    d = tiny.qk_rope_head_dim
    assert torch.equal(inv_freq(tiny, torch.device("cpu")), 1.0 / (tiny.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float) / d)))
