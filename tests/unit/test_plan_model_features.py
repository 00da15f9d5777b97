"""Model features priced or named (issue 31): sliding-window attention priced per layer (gpt-oss: window 128 on every
other layer), and every config.json key the planner does not price listed in one "not priced:" line."""
from __future__ import annotations

import dataclasses
import json

import pytest

from dwdp_trtllm.cli import build_parser, main
from dwdp_trtllm.commands.plan import build_spec
from dwdp_trtllm.spec.model_dims import dims_from_config, dims_from_config_json, not_priced
from dwdp_trtllm.perf.flops import core_flops
from dwdp_trtllm.perf.phases import Skew
from dwdp_trtllm.perf.planner import phases, sampled_load

GPT_OSS = "dwdp_trtllm/data/models/gpt-oss-120b.json"


def test_gpt_oss_reads_its_sliding_window_on_alternate_layers():
    spec = dims_from_config_json(GPT_OSS)
    assert (spec.sliding_window, spec.sliding_window_layers, spec.num_layers) == (128, 18, 36)
    data = json.load(open(GPT_OSS))
    types = ["sliding_attention", "full_attention", "full_attention"] * 12
    assert dims_from_config({**data, "layer_types": types}).sliding_window_layers == 12
    assert dims_from_config({**data, "sliding_window": None}).sliding_window == 0
    qwen_like = {**data, "model_type": "qwen3_moe", "use_sliding_window": False}
    assert dims_from_config(qwen_like).sliding_window == 0


@pytest.mark.parametrize("target", ["engine", "trtllm"])
def test_gpt_oss_attention_at_8k_is_below_full_attention_by_the_windows_share(target):
    """Half the layers attend to 128 keys: the core's FLOPs at ISL 8K are (1 - 1/2) + 1/2 x (128 x 8192 - 128^2 / 2)
    / (8192^2 / 2) of full attention; the attention core's time falls by the same share (same kernel rate)."""
    argv = ["plan", "--model", GPT_OSS, "--gpu", "h200", "--weight-dtype", "fp8", "--dwdp-size", "4", "--isl", "8192",
            "--target", target, "--no-bench-results"]
    spec = build_spec(build_parser().parse_args(argv))
    full = dataclasses.replace(spec, model=dataclasses.replace(spec.model, sliding_window=0, sliding_window_layers=0))
    share = 0.5 * (1 - (128 * 8192 - 128 ** 2 / 2) / (8192 ** 2 / 2))  # the fraction the window removes
    assert core_flops(spec.model, 8192) == pytest.approx(core_flops(full.model, 8192) * (1 - share))
    assert core_flops(spec.model, 8192, windowed=False) == pytest.approx(core_flops(full.model, 8192))
    win = phases(spec, sampled_load(spec, 8192, 4), 4, 8192, Skew())
    ful = phases(full, sampled_load(full, 8192, 4), 4, 8192, Skew())
    assert win.core_SR.mean() == pytest.approx(ful.core_SR.mean() * (1 - share), rel=1e-6)
    assert win.attention_SR.mean() < ful.attention_SR.mean()
    # the windowed layers' share matters less at a short ISL: at 256 tokens the window covers half of each request
    assert core_flops(spec.model, 256) / core_flops(full.model, 256) > core_flops(spec.model, 8192) / core_flops(full.model, 8192)


def test_not_priced_names_every_unpriced_key(capsys):
    data = json.load(open(GPT_OSS))
    assert not_priced(data) == ("swiglu_limit",)
    w4a8 = {**data, "quantization_config": {"quant_algo": "W4A8_AWQ"}, "n_group": 8, "topk_group": 4,
            "some_new_knob": 1}
    got = not_priced(w4a8)
    assert "quantization_config (W4A8_AWQ: no rates for it; experts priced at --weight-dtype)" in got
    assert "group-limited routing (n_group 8, topk_group 4)" in got and "some_new_knob" in got
    assert main(["plan", "--model", GPT_OSS, "--gpu", "b200", "--weight-dtype", "mxfp4", "--dwdp-size", "4",
                 "--isl", "8192", "--no-bench-results"]) == 0
    assert "not priced: swiglu_limit" in capsys.readouterr().out.splitlines()
    assert main(["plan", "--isl", "8192", "--mnt", "16384", "--json"]) == 0  # a preset: DeepSeek-R1's grouped routing
    assert json.loads(capsys.readouterr().out)["not_priced"] == ["group-limited routing (n_group 8, topk_group 4)"]
