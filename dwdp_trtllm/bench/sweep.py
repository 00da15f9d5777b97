"""From a bench YAML plus command-line overrides to the validated list of sweep points (no rank runs here).

Order of precedence: the YAML file, then every `--set KEY=VALUE` in order, then --device/--ranks/--repeat.
Every point is built (and so validated) before any runs: a bad value in the last point of a sweep is
reported before the first point spends time; so are the headers of every checkpoint a point reads. An error
caused by an override names `--set` as its file.
"""
from __future__ import annotations

import copy
import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..spec.config import BenchConfig, load_bench_points
from ..spec.routing_skew import load_counts_file, popularity_table
from ..spec.schema import MAX_SWEEP_POINTS, ConfigError, apply_override, load_yaml, parse_override
from .report import config_dict, point_hash


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its validated config, the swept keys' values, and its resume key."""

    config: BenchConfig
    values: dict[str, Any]
    config_dict: dict
    key: str  # point_hash(config_dict): names out_dir/points/<key>.json
    #: workload.routing_skew kind file: the counts file's MoE rows (routing_skew.load_counts_file), read once by
    #: load_sweep for every point naming that file; None for the other kinds
    skew_counts_LE: Any = field(default=None, compare=False, repr=False)  # an array: not compared, not printed

    def popularity_LE(self) -> Any:
        """The point's routing-skew popularity per MoE layer (routing_skew.popularity_table, from the counts read
        once), the table the parent hands to every rank; None when the skew is off."""
        skew = self.config.workload.routing_skew
        if skew.off:
            return None
        spec = self.config.model.spec()
        return popularity_table(skew, spec.num_moe_layers, spec.num_experts, spec.top_k, self.skew_counts_LE)


def _get(d: dict, dotted: str) -> Any:
    for k in dotted.split("."):
        d = d[k]
    return d


def load_sweep(config_path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, device: str | None = None,
               ranks: int | None = None, max_points: int = MAX_SWEEP_POINTS,
               repeat: int | None = None, data: dict | None = None) -> tuple[list[str], list[SweepPoint]]:
    """(swept dotted keys, points in sweep order with duplicates removed); device, ranks, repeat: the command's
    --device/--ranks/--repeat over run.*. data: the file's mapping when the caller has read it already
    (load_yaml(config_path); not modified here), so that a command reads its config file once."""
    file = str(config_path)
    data = load_yaml(config_path) if data is None else copy.deepcopy(data)
    sources: dict[str, str] = {}  # overridden dotted key -> the option that set it
    for text in overrides:
        try:
            path, value = parse_override(text)
            apply_override(data, path, value)
        except ConfigError as e:  # the override itself is malformed: blame --set, not the file
            raise ConfigError(f"--set {text!r}", e.key, e.expected) from None
        sources[".".join(path)] = "--set"
    for name, value in (("device", device), ("ranks", ranks), ("repeat", repeat)):
        if value is not None:
            apply_override(data, ["run", name], value)
            sources[f"run.{name}"] = f"--{name}"
    try:
        swept, configs = load_bench_points(data, file=file, max_points=max_points)
    except ConfigError as e:
        for k, source in sources.items():
            if e.key == k or e.key.startswith((k + ".", k + "[")) or k.startswith(e.key + ".") and e.key:
                raise ConfigError(f"{source} (over {file})", e.key, e.expected) from None
        raise
    _check_checkpoints(configs, file, sources)
    counts = _skew_counts(configs, file, sources)
    points, seen = [], set()
    for cfg in configs:
        d = config_dict(cfg)
        key = point_hash(d)
        if key in seen:
            continue
        seen.add(key)
        skew = cfg.workload.routing_skew
        points.append(SweepPoint(config=cfg, values={k: _get(d, k) for k in swept}, config_dict=d, key=key,
                                 skew_counts_LE=counts.get((skew.path, cfg.model.spec().num_experts))))
    return swept, points


def _skew_counts(configs: list[BenchConfig], file: str, sources: dict[str, str]) -> dict[tuple[str, int], Any]:
    """{(counts path, experts): counts_LE} of every routing_skew kind-file point, each file read once, before any
    rank starts (the ranks get the popularity from the parent); a bad file is a ConfigError on
    workload.routing_skew.path blaming --set or the config file."""
    out: dict[tuple[str, int], Any] = {}
    for cfg in configs:
        skew = cfg.workload.routing_skew
        if skew.kind != "file":
            continue
        k = (skew.path, cfg.model.spec().num_experts)
        if k in out:
            continue
        try:
            out[k] = load_counts_file(skew.path, k[1], key="workload.routing_skew.path")
        except ConfigError as e:
            source = next((sources[s] for s in ("workload.routing_skew.path", "workload.routing_skew", "workload")
                           if s in sources), None)
            raise ConfigError(f"{source} (over {file})" if source else file, e.key, e.expected) from None
    return out


def _check_checkpoints(configs: list[BenchConfig], file: str, sources: dict[str, str]) -> None:
    """The header checks of every checkpoint the points read (engine/checkpoint_check.py: the layer that loads
    checkpoints owns them), before any rank starts; a ConfigError on model.checkpoint blaming --set or the file."""
    seen: set[tuple[str, object]] = set()
    for cfg in configs:
        if cfg.model.checkpoint is None:
            continue
        spec = cfg.model.spec()
        if (cfg.model.checkpoint, spec) in seen:
            continue
        seen.add((cfg.model.checkpoint, spec))
        from ..engine.checkpoint_check import check_checkpoint

        try:
            check_checkpoint(cfg.model.checkpoint, spec)  # headers of the tensors of the layers used
        except ConfigError as e:
            source = sources.get("model.checkpoint") or sources.get("model")
            raise ConfigError(f"{source} (over {file})" if source else file, "model.checkpoint", e.expected) from None


#: device nodes of an NVIDIA driver (Linux, WSL, Jetson); with none of them no process here can see a CUDA device
_NVIDIA_NODES = ("/dev/nvidia*", "/dev/dxg", "/dev/nvhost*", "/dev/nvmap")


def check_device_present(points: list[SweepPoint], config_path: str | Path, overrides: list[str] | tuple[str, ...] = (),
                         device: str | None = None) -> None:
    """A cuda point on a machine whose torch sees no CUDA device is bad input, reported before any rank starts:
    a ConfigError on run.device blaming --device, the --set that gave it, or the file."""
    if not any(p.config.run.device == "cuda" for p in points):
        return
    if not any(glob.glob(pattern) for pattern in _NVIDIA_NODES):  # decided without importing torch (seconds)
        reason = "this machine has no NVIDIA driver device (/dev/nvidia*)"
    else:
        import torch

        if torch.cuda.device_count() > 0:
            return
        reason = "torch sees no CUDA device" + (" (a CPU-only torch build)" if torch.version.cuda is None else "")
    source = ("--device" if device is not None else
              "--set" if any(o.replace(" ", "").startswith("run.device=") for o in overrides) else str(config_path))
    raise ConfigError(source, "run.device", f"cuda, but {reason}; use --device cpu")
