"""The pricing flags `dwdp plan` and `dwdp size` share: one definition each, so both commands price what the user
states the same way (routing, DEP communication, DEP variant, copy slicing, interference).

Each `add_*` adds one flag to an argparse group (plan keeps them in its own groups; size in one "pricing" group);
the values reach the planner through `dwdp plan`'s own spec builder (commands/plan.build_spec). The parser imports
neither numpy nor the planner: the choices are spelled here and tests hold them equal to perf/.
"""
from __future__ import annotations

#: perf.phases.DEP_COMMS, spelled here so the parser does not import numpy (a test holds them equal)
DEP_COMMS = ("allgather_reducescatter", "alltoall", "deepep")
#: perf.dep_variants.VARIANTS, likewise
DEP_VARIANTS = ("trtllm", "deepep_deepgemm")
#: the flags this module defines (a test checks both commands have each one, with the same default)
FLAGS = ("--dep-comm", "--dep", "--slice-bytes", "--routing-skew", "--interference")


def add_dep_comm(g) -> None:
    g.add_argument("--dep-comm", default=None, choices=DEP_COMMS,
                   help="DEP's dispatch/combine path (TensorRT-LLM's fused_moe/communication strategies): "
                        "allgather_reducescatter (AllGatherReduceScatter, NCCL), alltoall (NVLinkOneSided) or deepep (DeepEP "
                        "high-throughput). "
                        "Default: what TensorRT-LLM 1.3.0rc20 auto-selects on the GPU (alltoall where MNNVL exists: "
                        "gb200; else deepep at DEP 2/4/8, allgather_reducescatter at other sizes), alltoall for "
                        "--target engine (docs/PLANNER.md)")


def add_dep(g, default_text: str = "every one that applies, one table and verdict each") -> None:
    g.add_argument("--dep", default=None, choices=DEP_VARIANTS,
                   help="the DEP you would otherwise run: trtllm (TensorRT-LLM's CUTLASS fp8_block MoE + its "
                        "communication) or deepep_deepgemm (DeepEP + DeepGEMM, what SGLang deploys on Hopper; FP8 "
                        f"experts on H100/H200). Default: {default_text}")


def add_slice_bytes(g, help_text: str = "candidate copy slice sizes, e.g. 2MiB,8MiB; 0 = unsliced (default 2MiB)") -> None:
    g.add_argument("--slice-bytes", default="2MiB", help=help_text)


def add_routing_skew(g) -> None:
    g.add_argument("--routing-skew", default=None,
                   help="expert-popularity skew: none | power_law_<alpha> (aiconfigurator's rows: 1.01, 1.2) | "
                        "zipf_<alpha> | a counts file (routing_skew.py); DEP's slowest EP rank and DWDP's GEMM tiles "
                        "(default: not known, a range from balanced (the nominal) to power_law_1.01)")


def add_interference(g) -> None:
    g.add_argument("--interference", type=float, default=None,
                   help="slowdown of compute overlapped with copies, every phase, in [1, 100) (default: the paper's "
                        "per-phase priors, docs/PLANNER.md; a one-GPU measurement never sets it)")


def add_all(g) -> None:
    """Every shared pricing flag in one group (`dwdp size`)."""
    add_routing_skew(g)
    add_dep_comm(g)
    add_dep(g, "trtllm (dwdp size prices one DEP)")
    add_slice_bytes(g, "DWDP's copy slice size, e.g. 2MiB; 0 = unsliced copies (default 2MiB)")
    add_interference(g)


def plan_argv(args) -> list[str]:
    """The shared flags the user gave, as `dwdp plan` arguments (None: not given, so plan's default applies)."""
    out: list[str] = []
    for flag in FLAGS:
        v = getattr(args, flag[2:].replace("-", "_"))
        if v is not None and not (flag == "--slice-bytes" and v == "2MiB"):
            out += [flag, str(v) if not isinstance(v, float) else repr(v)]
    return out
