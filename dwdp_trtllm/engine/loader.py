"""Load HuggingFace-layout safetensors checkpoints (DeepSeek, Qwen3-MoE, OLMoE, Mixtral) for the engine.

Shape legend: H hidden, I moe intermediate.

`load_checkpoint` returns the dense weights in our naming (weights.dense_weight_shapes) and an
expert_loader(layer, e) -> (w13_NH [2I, H], w2_HI [H, I]) that reads one expert on demand, so a rank
loads only the experts it holds. FP8 tensors with a `<name>_scale_inv` companion (DeepSeek-V3 release
layout, 128x128 blocks) are dequantised on load. `save_checkpoint` writes the inverse (tests, demos).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import torch

from ..errors import ConfigError
from ..spec.json_values import load_json
from ..spec.models import ModelSpec
from .weights import FP8_DTYPE, dense_dtype, dense_weight_shapes, dequantize_fp8_blockwise

ExpertLoader = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]

INDEX_NAME = "model.safetensors.index.json"


def hf_dense_name(spec: ModelSpec, name: str) -> str:
    """Checkpoint name of one of our dense tensors (ours follow DeepSeek/Qwen3; Mixtral renames the MoE)."""
    if spec.family == "mixtral":
        return re.sub(r"\.mlp\.gate\.weight$", ".block_sparse_moe.gate.weight", name)
    return name


def hf_expert_names(spec: ModelSpec, layer: int, e: int) -> tuple[str, str, str]:
    """Checkpoint names of (gate, up, down) of expert `e` of layer `layer`."""
    if spec.family == "mixtral":
        p = f"model.layers.{layer}.block_sparse_moe.experts.{e}."
        return p + "w1.weight", p + "w3.weight", p + "w2.weight"
    p = f"model.layers.{layer}.mlp.experts.{e}."
    return p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"


def read_index(d: Path) -> dict[str, str] | None:
    """weight_map of model.safetensors.index.json (None when the directory has no index)."""
    f = d / INDEX_NAME
    if not f.exists():
        return None
    data = load_json(f, "model.checkpoint")  # bounded nesting: json_values.py
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise ConfigError(None, "checkpoint", f"{f}: expected a JSON object with a 'weight_map' of tensor name -> file name")
    return wm


class _Checkpoint:
    """Name -> file index over a directory of *.safetensors, files opened lazily (mmap)."""

    def __init__(self, path: str | Path):
        from safetensors import safe_open

        self._safe_open = safe_open
        self.dir = Path(path)
        if not self.dir.is_dir():
            raise FileNotFoundError(f"checkpoint directory {str(self.dir)!r} does not exist")
        weight_map = read_index(self.dir)
        if weight_map is not None:  # files are opened when one of their tensors is first read
            self.file_of = {k: self.dir / v for k, v in weight_map.items()}
        else:
            files = sorted(self.dir.glob("*.safetensors"))
            if not files:
                raise FileNotFoundError(f"checkpoint directory {str(self.dir)!r} holds no *.safetensors file")
            self.file_of = {}
            for f in files:
                with safe_open(str(f), framework="pt", device="cpu") as h:
                    self.file_of.update({k: f for k in h.keys()})
        self._handles: dict[Path, object] = {}

    def get(self, name: str, shape: tuple[int, ...], *, dequantize: bool = True) -> torch.Tensor:
        """Tensor `name` (fp8 + scale_inv dequantised to float32 unless dequantize=False), checked against `shape`."""
        f = self.file_of.get(name)
        if f is None:
            raise KeyError(f"checkpoint {str(self.dir)!r}: tensor {name!r} not found (expected shape {shape})")
        if f not in self._handles:
            if not f.exists():
                raise FileNotFoundError(f"checkpoint {str(self.dir)!r}: file {f.name!r} (holding {name!r}) is missing")
            self._handles[f] = self._safe_open(str(f), framework="pt", device="cpu")
        t = self._handles[f].get_tensor(name)  # type: ignore[attr-defined]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"checkpoint {str(self.dir)!r}: tensor {name!r} in file {f.name!r} has shape "
                             f"{tuple(t.shape)}, expected {tuple(shape)}")
        if dequantize and t.dtype == FP8_DTYPE and self.has_scale(name):
            t = dequantize_fp8_blockwise(t, self.scale_of(name, shape))
        if t.is_floating_point() and not bool(torch.isfinite(t.float() if t.dtype == FP8_DTYPE else t).all()):
            raise ConfigError(None, "model.checkpoint", f"{f}: tensor {name!r} holds NaN or Inf values")
        return t

    def has_scale(self, name: str) -> bool:
        return name + "_scale_inv" in self.file_of

    def scale_of(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """`<name>_scale_inv` of an e4m3 tensor of `shape`: float32 [ceil(N/128), ceil(K/128)]."""
        return self.get(name + "_scale_inv", (-(-shape[0] // 128), -(-shape[1] // 128))).float()

    def has(self, name: str) -> bool:
        return name in self.file_of


def load_checkpoint(path: str | Path, spec: ModelSpec, *, dtype: torch.dtype, device: torch.device | str,
                    keep_fp8: bool = False) -> tuple[dict[str, torch.Tensor], ExpertLoader]:
    """(dense_weights in our naming on `device`, expert_loader(layer, e) -> (w13_NH, w2_HI) in `dtype`).

    `layer` is the absolute layer index; a truncated spec loads the first spec.num_layers layers. keep_fp8: dense
    e4m3 tensors with a `_scale_inv` stay codes, their scales beside them as `<name>_scale_inv` (float32), for
    MoETransformer's FP8 linear layers (engine/fp8_linear.py), which dequantises them when those are off."""
    ckpt = _Checkpoint(path)
    dense = {}
    for name, shape in dense_weight_shapes(spec).items():
        hf = hf_dense_name(spec, name)
        t = ckpt.get(hf, shape, dequantize=not keep_fp8)
        if t.dtype == FP8_DTYPE and ckpt.has_scale(hf):
            dense[name], dense[name + "_scale_inv"] = t.to(device), ckpt.scale_of(hf, shape).to(device)
            continue
        dense[name] = t.to(device=device, dtype=dense_dtype(name, dtype))
    H, I = spec.hidden_size, spec.moe_intermediate

    def expert_loader(layer: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        if layer not in spec.moe_layer_ids or not 0 <= e < spec.num_experts:
            raise ValueError(f"expert_loader: (layer={layer}, expert={e}) is not a routed expert of {spec.name}")
        g, u, d = hf_expert_names(spec, layer, e)
        w13 = torch.cat([ckpt.get(g, (I, H)).to(dtype), ckpt.get(u, (I, H)).to(dtype)])
        return w13.to(device), ckpt.get(d, (H, I)).to(device=device, dtype=dtype)

    return dense, expert_loader


def load_lm_head(path: str | Path, spec: ModelSpec, *, tied: bool = False) -> torch.Tensor | None:
    """lm_head_VH (float32, CPU) of the checkpoint: `lm_head.weight`, the embedding when `tied`, else None."""
    ckpt = _Checkpoint(path)
    shape = (spec.vocab_size, spec.hidden_size)
    if ckpt.has("lm_head.weight"):
        return ckpt.get("lm_head.weight", shape).float()
    return ckpt.get("model.embed_tokens.weight", shape).float() if tied else None


def save_checkpoint(path: str | Path, spec: ModelSpec, dense: dict[str, torch.Tensor], expert_fn: ExpertLoader,
                    *, num_files: int = 1) -> None:
    """Write `dense` + every routed expert as HF-named safetensors, split by layer over `num_files`
    files (with model.safetensors.index.json when num_files > 1)."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(max(1, num_files))]

    def shard_of(layer: int) -> dict[str, torch.Tensor]:
        return shards[layer * len(shards) // spec.num_layers] if layer >= 0 else shards[0]

    for name, t in dense.items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        shard_of(int(m.group(1)) if m else -1)[hf_dense_name(spec, name)] = t.detach().cpu().contiguous()
    I = spec.moe_intermediate
    for layer in spec.moe_layer_ids:
        for e in range(spec.num_experts):
            w13, w2 = expert_fn(layer, e)
            g, u, d = hf_expert_names(spec, layer, e)
            shard_of(layer).update({g: w13[:I].cpu().contiguous(), u: w13[I:].cpu().contiguous(), d: w2.cpu().contiguous()})
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"))
        return
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname))
        weight_map.update({k: fname for k in shard})
    (out / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
