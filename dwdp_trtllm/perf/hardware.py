"""GPU specs for the planner: datasheet peaks plus efficiency factors, read from GPU spec files (YAML).

The shipped GPUs are files under dwdp_trtllm/data/gpus/ (h100, h200, b200, gb200, mi355x), every number with
its source in a comment there: a vendor datasheet peak (dense, i.e. without 2:4 sparsity), a measurement of ours
on the H200 (DESIGN.md section 5), a public report (named), or an explicit ASSUMPTION. A user describes another
accelerator in a file of the same format (`dwdp plan --gpu-spec FILE`; gen-config, plan-placement and
validate-plan take the path as `--gpu FILE`); docs/PLANNER.md ("GPU spec files") documents the keys. A calibration file (calibration.py) overrides the efficiencies.

Units: TFLOP/s, TB/s (HBM), GB/s (peer links, one direction), GB (memory, 1e9 bytes), W.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..spec.schema import ConfigError, load_yaml

#: matmul dtype names the planner knows; "nvfp4" runs on FP4 tensor cores
MATMUL_DTYPES = ("bf16", "fp8", "nvfp4")
#: where the shipped spec files live (package data)
SPEC_DIR = Path(__file__).resolve().parents[1] / "data" / "gpus"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU: datasheet peaks and the fractions of them that kernels reach."""

    name: str
    bf16_tflops: float  # dense BF16 tensor-core peak
    fp8_tflops: float  # dense FP8 tensor-core peak
    fp4_tflops: float | None  # dense FP4 tensor-core peak; None = no FP4 tensor cores (Hopper)
    hbm_tbps: float  # HBM bandwidth
    nvlink_gbps: float  # peer bandwidth per direction: per GPU (switch) or per link (mesh)
    copy_engines: int | None  # CUDA asyncEngineCount; None = not verified for this GPU
    memory_gb: float  # HBM capacity
    # ---- efficiency factors (fraction of the peak above) ----
    gemm_eff: dict[str, float]  # grouped/dense GEMM, by matmul dtype
    attention_eff: float  # causal SDPA (FlashAttention-class kernel) at the BF16 peak
    hbm_eff: float  # achievable fraction of hbm_tbps
    nvlink_eff: float  # copy-engine peer copy, one direction, fraction of the peer bandwidth
    a2a_eff: float  # MoE dispatch/combine kernels (DeepEP-class), fraction of the peer bandwidth
    a2a_latency_us: float = 20.0  # fixed cost of one layer's dispatch + combine (launch, notify); assumption
    tdp_w: float | None = None  # board power limit; None = not stated
    peer_topology: str = "switch"  # switch: any peer at nvlink_gbps; mesh: one nvlink_gbps link per peer
    peer_links: int = 1  # mesh: links per GPU (peers reachable at once); switch: 1
    peer_measured_peers: int | None = None  # concurrent peers behind copy_efficiency's measurement (None: one pair
    #                                        or a public report); the planner's range trusts no more links than that
    peer_evidence: str | None = None  # the published measurement of this family's peer copies (None: none; the
    #                                  planner then ranges the copies and interference wide: uncertainty.peer_evidence)
    source: str = ""  # the spec file it was read from

    def matmul_tflops(self, dtype: str) -> float:
        """Achievable matmul TFLOP/s for `dtype` (bf16 | fp8 | nvfp4 | mxfp4); FP4 falls back to FP8 on Hopper.
        MXFP4 (E8M0 scale per 32) runs on the same FP4 tensor cores as NVFP4: its rate is the nvfp4 one."""
        if dtype == "mxfp4":
            dtype = "nvfp4"
        if dtype not in MATMUL_DTYPES:
            raise ValueError(f"matmul dtype {dtype!r}: expected one of {', '.join(MATMUL_DTYPES)}")
        if dtype == "nvfp4" and self.fp4_tflops is None:
            dtype = "fp8"  # Hopper has no FP4 tensor cores: weights are dequantised to FP8
        peak = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "nvfp4": self.fp4_tflops}[dtype]
        return float(peak) * self.gemm_eff[dtype]

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12 * self.hbm_eff

    @property
    def link_gbps_total(self) -> float:
        """Peer bandwidth per direction with every peer link busy (switch: the GPU's NVLink; mesh: links x link)."""
        return self.nvlink_gbps * (self.peer_links if self.peer_topology == "mesh" else 1)

    def peer_bytes_per_s_for(self, group: int) -> float:
        """Achievable pull bandwidth of one rank pulling from the other group-1 ranks at once (a mesh uses one
        link per peer, so a small group leaves links idle)."""
        links = min(max(group - 1, 1), self.peer_links) if self.peer_topology == "mesh" else 1
        return self.nvlink_gbps * links * 1e9 * self.nvlink_eff

    @property
    def peer_bytes_per_s(self) -> float:
        """Achievable pull bandwidth with every peer link busy (see peer_bytes_per_s_for for a given group)."""
        return self.link_gbps_total * 1e9 * self.nvlink_eff

    def a2a_bytes_per_s_for(self, group: int) -> float:
        """MoE dispatch/combine bandwidth in a group of `group` ranks (a mesh uses one link per peer)."""
        return self.peer_bytes_per_s_for(group) / self.nvlink_eff * self.a2a_eff

    @property
    def attention_flops_per_s(self) -> float:
        return self.bf16_tflops * 1e12 * self.attention_eff


# ---- the file format -----------------------------------------------------------------------------
_TOP = {"name", "memory_gb", "hbm_tbps", "tdp_w", "dense_tflops", "peer", "efficiency", "a2a_latency_us"}
_PEER = {"topology", "gbps_per_direction", "links", "copy_efficiency", "copy_engines", "measured_peers", "evidence"}
_EFF = {"gemm", "attention", "hbm", "a2a"}


class _Spec:
    """Takes typed values out of a spec file's mapping; every error names the file and the dotted key."""

    def __init__(self, data: dict, file: str):
        self.data, self.file = data, file

    def section(self, key: str, allowed: set[str]) -> dict:
        d = self.data.get(key)
        if not isinstance(d, dict):
            raise ConfigError(self.file, key, f"expected a mapping with keys {', '.join(sorted(allowed))}, got {d!r}")
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ConfigError(self.file, f"{key}.{unknown[0]}", f"unknown key; expected one of {', '.join(sorted(allowed))}")
        return d

    def num(self, d: dict, key: str, path: str, *, lo: float = 0.0, hi: float = math.inf, lo_open: bool = True,
            optional: bool = False) -> float | None:
        if key not in d or d[key] is None:
            if optional:
                return None
            raise ConfigError(self.file, path, "required number is missing" if key not in d else "expected a number, got null")
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(self.file, path, f"expected a number, got {v!r}")
        if v < lo or (lo_open and v == lo) or v > hi:
            raise ConfigError(self.file, path, f"expected a number in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v!r}")
        return float(v)


def spec_from_dict(data: dict, file: str = "<gpu spec>") -> GpuSpec:
    """A GpuSpec from a spec file's mapping; unknown keys, missing keys and out-of-range values raise ConfigError
    naming `file` and the dotted key."""
    if not isinstance(data, dict):
        raise ConfigError(file, "", f"expected a mapping of GPU spec keys, got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ConfigError(file, unknown[0], f"unknown key; expected one of {', '.join(sorted(_TOP))}")
    s = _Spec(data, file)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(file, "name", f"expected a non-empty string, got {name!r}")
    tf = s.section("dense_tflops", {"bf16", "fp8", "fp4"})
    peer = s.section("peer", _PEER)
    eff = s.section("efficiency", _EFF)
    gemm = eff.get("gemm")
    if not isinstance(gemm, dict) or set(gemm) != set(MATMUL_DTYPES):
        raise ConfigError(file, "efficiency.gemm", f"expected a mapping with exactly the keys {', '.join(MATMUL_DTYPES)}, "
                                                   f"got {gemm!r}")
    topology = peer.get("topology", "switch")
    if topology not in ("switch", "mesh"):
        raise ConfigError(file, "peer.topology", f"expected 'switch' or 'mesh', got {topology!r}")
    links = peer.get("links", 1)
    if isinstance(links, bool) or not isinstance(links, int) or not 1 <= links <= 1024:
        raise ConfigError(file, "peer.links", f"expected an integer in [1, 1024], got {links!r}")
    ce = peer.get("copy_engines")
    if ce is not None and (isinstance(ce, bool) or not isinstance(ce, int) or not 1 <= ce <= 64):
        raise ConfigError(file, "peer.copy_engines", f"expected an integer in [1, 64] or null, got {ce!r}")
    mp = peer.get("measured_peers")
    if mp is not None and (isinstance(mp, bool) or not isinstance(mp, int) or not 1 <= mp <= 1024):
        raise ConfigError(file, "peer.measured_peers", f"expected an integer in [1, 1024] or null, got {mp!r}")
    ev = peer.get("evidence")
    if ev is not None and (not isinstance(ev, str) or not ev.strip()):
        raise ConfigError(file, "peer.evidence", f"expected the published measurement of these peer copies (a "
                                                 f"non-empty string) or null, got {ev!r}")
    frac = dict(hi=1.0)
    return GpuSpec(
        name=name.strip().lower(), source=file,
        memory_gb=s.num(data, "memory_gb", "memory_gb", hi=1e5),
        hbm_tbps=s.num(data, "hbm_tbps", "hbm_tbps", hi=1e3),
        tdp_w=s.num(data, "tdp_w", "tdp_w", hi=1e5, optional=True),
        bf16_tflops=s.num(tf, "bf16", "dense_tflops.bf16", hi=1e6),
        fp8_tflops=s.num(tf, "fp8", "dense_tflops.fp8", hi=1e6),
        fp4_tflops=s.num(tf, "fp4", "dense_tflops.fp4", hi=1e6, optional=True),
        nvlink_gbps=s.num(peer, "gbps_per_direction", "peer.gbps_per_direction", hi=1e5),
        nvlink_eff=s.num(peer, "copy_efficiency", "peer.copy_efficiency", **frac),
        copy_engines=ce, peer_measured_peers=mp, peer_evidence=ev and ev.strip(), peer_topology=topology, peer_links=links if topology == "mesh" else 1,
        gemm_eff={k: s.num(gemm, k, f"efficiency.gemm.{k}", **frac) for k in MATMUL_DTYPES},
        attention_eff=s.num(eff, "attention", "efficiency.attention", **frac),
        hbm_eff=s.num(eff, "hbm", "efficiency.hbm", **frac),
        a2a_eff=s.num(eff, "a2a", "efficiency.a2a", **frac),
        a2a_latency_us=_or(s.num(data, "a2a_latency_us", "a2a_latency_us", lo=0.0, lo_open=False, hi=1e6, optional=True),
                           20.0))


def _or(v: float | None, default: float) -> float:
    return default if v is None else v


#: spec-file keys whose ASSUMPTION marks make a plan's compute or copy an assumption (assumed_keys)
PRICING_KEYS = ("copy_efficiency", "gemm", "attention", "hbm", "a2a", "a2a_latency_us")


def assumed_keys(spec: GpuSpec) -> tuple[str, ...]:
    """The pricing keys (PRICING_KEYS) whose line in the spec file is marked ASSUMPTION (the shipped files mark every
    number's source in a comment: datasheet, MEASURED, PUBLIC REPORT or ASSUMPTION); () when the file is not
    readable."""
    try:
        text = Path(spec.source).read_text(encoding="utf-8")
    except OSError:
        return ()
    out = []
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip()
        if key in PRICING_KEYS and "ASSUMPTION" in line.split("#", 1)[-1] and "#" in line:
            out.append(key)
    return tuple(dict.fromkeys(out))


def load_gpu_spec(path: str | Path) -> GpuSpec:
    """Read a GPU spec file (YAML); any problem raises ConfigError naming the file and the key."""
    return spec_from_dict(load_yaml(path), str(path))


def _shipped() -> dict[str, GpuSpec]:
    specs = {p.stem: load_gpu_spec(p) for p in sorted(SPEC_DIR.glob("*.yaml"))}
    for stem, spec in specs.items():
        if spec.name != stem:  # `--gpu NAME` finds a file by its stem: the two must agree
            raise ConfigError(spec.source, "name", f"expected {stem!r} (the file's name), got {spec.name!r}")
    return specs


GPUS: dict[str, GpuSpec] = _shipped()


def is_spec_path(name: str) -> bool:
    """True when `name` names a spec file rather than a shipped GPU (a .yaml/.yml suffix or a path separator)."""
    return str(name).lower().endswith((".yaml", ".yml")) or "/" in str(name)


def get_gpu(name: str) -> GpuSpec:
    """A shipped GPU spec by name (h100 | h200 | b200 | gb200 | mi355x) or a GPU spec file's path."""
    if is_spec_path(name):
        return load_gpu_spec(name)
    try:
        return GPUS[str(name).lower()]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}: expected one of {', '.join(GPUS)} or a GPU spec file (.yaml)") from None
