"""A tiny DeepSeek-like decoder: per layer a dense residual "attention" and a routed MoE block.

The MoE block calls its experts through nn.Module.__call__ (`self.experts(...)`), as Deepseekv3MoE.
compute_routed_output does (stored ids 2891600299, 3518086746); the engine calls the model's forward
directly (pyexecutor/model_engine.py). Weights come from a seeded full checkpoint (`tiny_checkpoint`).

One-model MTP (FAKE_MTP = draft steps, 0: none), as tensorrt_llm/_torch/models/modeling_speculative.py @ b35ac1b6
builds and runs it: SpecDecOneEngineForCausalLM.forward runs the trunk (`self.model(...)`), then its spec worker,
inside the same model.forward; MTPForCausalLM makes `mtp_layers` of DeepseekV3MTP with layer_idx num_hidden_layers + i
(one layer with mtp_eagle_one_model), and MTPEagleWorker.forward (speculative/mtp.py @ 23ee85ee) runs
`draft_model.mtp_layers[0]` once per draft step (mtp_num_modules times). Here: one MTP block (its own "attention"
and MoE, layer_idx 3 + LAYERS) run FAKE_MTP times after the trunk. `run_layers` (set by the caller, None: all): a
forward that stops after that many trunk layers (and runs no MTP step), to model forwards that skip the tail.
"""
import os

import torch

from ..modules.fused_moe.configurable_moe import ConfigurableMoE
from ..modules.fused_moe.quantization import BLOCK

# FAKE_H / FAKE_I: the GPU test uses expert tensors of whole 2 MiB VMM pages (composite view)
H, I = int(os.environ.get("FAKE_H", "128")), int(os.environ.get("FAKE_I", "128"))
E, TOP_K, LAYERS = 8, 2, 3
MTP = int(os.environ.get("FAKE_MTP", "0"))  # draft steps of the one MTP layer per forward (0: no MTP layer)


class Renormalize:
    """RenormalizeMoeRoutingMethod: top-k of the logits, softmax over the k."""

    top_k = TOP_K

    def apply(self, router_logits):
        w, ids = torch.topk(router_logits.float(), TOP_K, dim=-1)
        return ids, torch.softmax(w, dim=-1)


class TinyMoeBlock(torch.nn.Module):
    def __init__(self, model_config, layer_idx):
        super().__init__()
        self.gate = torch.nn.Linear(H, E, bias=False)
        self.experts = ConfigurableMoE(routing_method=Renormalize(), num_experts=E, hidden_size=H, intermediate_size=I,
                                       dtype=torch.bfloat16, model_config=model_config, layer_idx=layer_idx)

    def forward(self, h):
        return self.experts(h, self.gate(h))


class TinyDecoder(torch.nn.Module):
    def __init__(self, model_config):
        super().__init__()
        self.attn = torch.nn.ModuleList(torch.nn.Linear(H, H, bias=False) for _ in range(LAYERS))
        self.mlp = torch.nn.ModuleList(TinyMoeBlock(model_config, layer_idx=3 + i) for i in range(LAYERS))
        if MTP:  # after the trunk, as MTPForCausalLM's layers follow the decoder's (layer_idx num_hidden_layers + i)
            self.attn.append(torch.nn.Linear(H, H, bias=False))
            self.mlp.append(TinyMoeBlock(model_config, layer_idx=3 + LAYERS))
        self.run_layers = None

    def forward(self, hidden_states):
        h = hidden_states
        n = LAYERS if self.run_layers is None else self.run_layers
        for attn, mlp in zip(self.attn[:n], self.mlp[:n]):
            h = h + attn(h)
            h = h + mlp(h)
        for _ in range(MTP if n == LAYERS else 0):  # one MTP layer, once per draft step
            h = h + self.attn[LAYERS](h)
            h = h + self.mlp[LAYERS](h)
        return h

    def load_weights(self, ckpt):
        with torch.no_grad():
            for i in range(len(self.mlp)):
                self.attn[i].weight.copy_(ckpt[f"layers.{i}.attn"])
                self.mlp[i].gate.weight.copy_(ckpt[f"layers.{i}.gate"])
                pre = f"layers.{i}.experts."
                self.mlp[i].experts.load_weights({k[len(pre):]: v for k, v in ckpt.items() if k.startswith(pre)})


def tiny_checkpoint(seed: int, quant: str | None):
    g = torch.Generator().manual_seed(seed)
    ck = {}
    for i in range(LAYERS + (1 if MTP else 0)):  # the MTP layer's weights after the trunk's (same trunk weights)
        ck[f"layers.{i}.attn"] = torch.randn(H, H, generator=g) * 0.05
        ck[f"layers.{i}.gate"] = torch.randn(E, H, generator=g)
        for e in range(E):
            for name, shape in (("w1", (I, H)), ("w3", (I, H)), ("w2", (H, I))):
                w = torch.randn(*shape, generator=g) * 0.1
                if quant == "fp8_block_scales":
                    s = torch.rand(shape[0] // BLOCK, shape[1] // BLOCK, generator=g) * 0.02 + 0.01
                    ck[f"layers.{i}.experts.{e}.{name}.weight"] = (w / 0.015).to(torch.float8_e4m3fn)
                    ck[f"layers.{i}.experts.{e}.{name}.weight_scale_inv"] = s
                else:
                    ck[f"layers.{i}.experts.{e}.{name}.weight"] = w.to(torch.bfloat16)
    return ck
