"""MTP layers in the one memory model: a checkpoint with num_nextn_predict_layers (DeepSeek-V3/R1: 1) runs them on a
TensorRT-LLM server as MoE layers after the trunk (one-model MTP, models/modeling_speculative.py @ b35ac1b6
MTPForCausalLM), split by DWDP like the trunk's layers, so rank_memory prices their routed experts (DWDP: the rank's
local experts of one more layer; DEP: ceil(E/G) more); the embedded engine (engine_dense) runs the trunk only. The
parts a user sees stay the same parts."""
import dataclasses
import json
import math

from dwdp_trtllm.deploy import memory
from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.spec.hf_config import spec_from_hf_config
from dwdp_trtllm.spec.model_dims import dims_from_config
from dwdp_trtllm.spec.models import get_model
from dwdp_trtllm.core.placement import make_placement


def test_mtp_layer_experts_are_priced_for_trtllm_servers_only():
    mtp = get_model("deepseek-r1")  # the release's one MTP layer (num_nextn_predict_layers 1)
    r1 = dataclasses.replace(mtp, mtp_layers=0)
    assert mtp.mtp_layers == 1
    kw = dict(weight_dtype="fp8", max_num_tokens=8192)
    cfg = DwdpConfig(dwdp_size=8)
    eb = r1.expert_bytes("fp8")
    n_local = max(len(x) for x in make_placement(cfg, r1.num_experts).local_experts)
    base, with_mtp = memory.rank_memory(r1, "dwdp", dwdp=cfg, **kw), memory.rank_memory(mtp, "dwdp", dwdp=cfg, **kw)
    assert with_mtp.routed_experts - base.routed_experts == n_local * eb  # one more MoE layer of local experts
    assert with_mtp.parts().keys() == base.parts().keys()
    assert {k: v for k, v in with_mtp.parts().items() if k != memory.PARTS["routed_experts"]} == \
        {k: v for k, v in base.parts().items() if k != memory.PARTS["routed_experts"]}
    dep0, dep1 = memory.rank_memory(r1, "dep", group_size=8, **kw), memory.rank_memory(mtp, "dep", group_size=8, **kw)
    assert dep1.routed_experts - dep0.routed_experts == math.ceil(r1.num_experts / 8) * eb
    engine = memory.dwdp_ranks(mtp, cfg, engine_dense=True, **kw)[0]  # the embedded engine runs no MTP layer
    assert engine.routed_experts == memory.dwdp_ranks(r1, cfg, engine_dense=True, **kw)[0].routed_experts
    assert memory.priced_moe_layers(mtp) == r1.num_moe_layers + 1 == 59


def test_checkpoint_num_nextn_predict_layers_sets_mtp_layers(tmp_path):
    from test_checkpoint_config import DEEPSEEK_V3_RELEASE as RELEASE  # tests/unit is on sys.path
    (tmp_path / "config.json").write_text(json.dumps(RELEASE))
    assert spec_from_hf_config(tmp_path).mtp_layers == 1
    assert dims_from_config(RELEASE).mtp_layers == 1  # dims-only (plan --model, gen-config --preset config.json)
    assert dims_from_config({k: v for k, v in RELEASE.items() if k != "num_nextn_predict_layers"}).mtp_layers == 0


def test_a_preset_cut_short_has_no_mtp_layer():
    """The MTP layer follows the checkpoint's last trunk layer: a preset at its full depth keeps it (and prices it on a
    TensorRT-LLM server), a preset cut to fewer layers (`--num-layers`, model.num_layers) has none."""
    assert get_model("deepseek-r1").mtp_layers == get_model("deepseek-r1", 61).mtp_layers == 1
    assert get_model("deepseek-r1", 5).mtp_layers == 0 and get_model("qwen3-30b-a3b").mtp_layers == 0
    full, cut = get_model("deepseek-r1"), get_model("deepseek-r1", 60)
    assert memory.priced_moe_layers(full) == 59 and memory.priced_moe_layers(cut) == 57
