"""Checks of a safetensors checkpoint that need only its headers, run before any rank starts (bench/sweep.py).

For the tensors a (possibly truncated) spec needs: the index JSON parses and has a weight_map, every
file it names exists and is a readable safetensors file (a truncated or garbage file fails its header
check), every tensor is present with its shape and a floating dtype (FP8 with its `_scale_inv`).
Values (NaN/Inf) are checked as tensors are read (loader._Checkpoint.get). Errors are ConfigError on key
`checkpoint` whose message names the file and tensor.
"""
from __future__ import annotations

from pathlib import Path

from ..spec.models import ModelSpec
from ..spec.schema import ConfigError
from .loader import INDEX_NAME, hf_dense_name, hf_expert_names, read_index  # noqa: F401 - read_index re-exported
from .weights import dense_weight_shapes

#: safetensors dtypes the loader reads as weights
FLOAT_DTYPES = ("F32", "F16", "BF16", "F8_E4M3")


def _err(msg: str) -> ConfigError:
    return ConfigError(None, "checkpoint", msg)


def needed_tensors(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> shape of every tensor the engine reads for `spec` (its layers only)."""
    out = {hf_dense_name(spec, n): s for n, s in dense_weight_shapes(spec).items()}
    H, I = spec.hidden_size, spec.moe_intermediate
    for layer in spec.moe_layer_ids:
        for e in range(spec.num_experts):
            g, u, d = hf_expert_names(spec, layer, e)
            out.update({g: (I, H), u: (I, H), d: (H, I)})
    return out


def check_checkpoint(path: str | Path, spec: ModelSpec) -> None:
    """Raise ConfigError naming the file/tensor for the first header-level problem of the checkpoint."""
    from safetensors import SafetensorError, safe_open

    d = Path(path)
    wm = read_index(d)
    files = sorted({d / v for v in wm.values()}) if wm is not None else sorted(d.glob("*.safetensors"))
    if not files:
        raise _err(f"{d}: holds no *.safetensors file")
    headers: dict[str, tuple[Path, str, tuple[int, ...]]] = {}
    for f in files:
        if not f.is_file():
            raise _err(f"{f}: named in {INDEX_NAME} but missing")
        try:
            with safe_open(str(f), framework="pt", device="cpu") as h:
                for k in h.keys():
                    sl = h.get_slice(k)
                    headers[k] = (f, sl.get_dtype(), tuple(sl.get_shape()))
        except (SafetensorError, OSError) as e:
            raise _err(f"{f}: not a readable safetensors file ({e})") from None
    for name, shape in needed_tensors(spec).items():
        if name not in headers:
            raise _err(f"{d}: tensor {name!r} not found (expected shape {shape})")
        f, dt, got = headers[name]
        if dt not in FLOAT_DTYPES:
            raise _err(f"{f}: tensor {name!r} has dtype {dt}; expected one of {', '.join(FLOAT_DTYPES)}")
        if got != shape:
            raise _err(f"{f}: tensor {name!r} has shape {got}, expected {shape}")
        if dt == "F8_E4M3" and name + "_scale_inv" not in headers:
            raise _err(f"{f}: FP8 tensor {name!r} has no {name + '_scale_inv'!r} (128x128 block scales)")
