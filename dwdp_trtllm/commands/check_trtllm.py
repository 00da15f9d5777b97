"""`dwdp check-trtllm`: what the installed TensorRT-LLM offers DWDP here, and what dwdp_trtllm would do.

Reports the TensorRT-LLM version (or "not installed"), each patch target (present / missing), whether
upstream DWDP exists (`"dwdp_config" in TorchLlmArgs.model_fields`) and where it can run (Blackwell +
NVFP4 + CuteDSL), the GPU, the engine our mode would pick and how it runs the experts (composite view,
multi_buffer or merge: moe_evidence.gemm_order), and which lifecycle drives our manager:
"upstream" (ConfigurableMoE.forward_impl calls wait_and_bind, record_compute_and_prefetch_next) when the
lifecycle targets are present, else "hooks" (MoE forward hooks), with the reason. The last line is one verdict:
ready (engine, lifecycle) or not ready and why, with the TensorRT-LLM version range the package declares and the
install hint. Exit code: 0 when the verdict is READY, 1 when it is NOT READY (with --json too: the verdict is the
JSON's "verdict"), 2 for bad arguments; so a script can gate on `dwdp check-trtllm && dwdp serve ...`.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re


#: how the dwdp_trtllm engine runs the routed experts on TensorRT-LLM: moe_evidence.gemm_order (the order
#: integration/gemm_choice.py choose_gemm applies); the log and model._dwdp_trtllm_runtime['gemm_reason'] say which and why
GEMM_CHOICE_NOTE = "; the log and model._dwdp_trtllm_runtime['gemm_reason'] say which ran and why"


#: how to get TensorRT-LLM (also `dwdp serve`'s message when trtllm-serve is not on PATH)
INSTALL_HINT = "it is the [trtllm] extra; PyPI only has a stub - use an NGC TensorRT-LLM container"


def trtllm_requirement() -> str:
    """The TensorRT-LLM version range this package declares (its [trtllm] extra), e.g. 'tensorrt_llm>=1.0'."""
    try:
        reqs = importlib.metadata.requires("dwdp-trtllm") or []
    except importlib.metadata.PackageNotFoundError:
        reqs = []
    for r in reqs:
        name = re.split(r"[<>=!~; ]", r, maxsplit=1)[0]
        if name.replace("-", "_") == "tensorrt_llm":
            return r.split(";")[0].strip()
    return "tensorrt_llm"


def verdict(rep: dict) -> tuple[bool, str]:
    """(ready, the one line check-trtllm ends with): what keeps DWDP from running here, first blocker first."""
    need = f"needs {trtllm_requirement()} ({INSTALL_HINT})"
    version = rep["tensorrt_llm"]
    if version == "not installed":
        return False, f"NOT READY: TensorRT-LLM is not installed; {need}"
    if str(version).startswith("import failed"):
        return False, f"NOT READY: TensorRT-LLM {version}; {need}"
    m = rep["our_mode"]
    if m["engine"] == "error":
        return False, f"NOT READY: no engine can run here: {m['reason']}"
    if m["engine"] == "dwdp_trtllm":
        missing = [f"{t['module']}:{t['attribute']}" for t in rep["patch_targets"]
                   if not t["optional"] and t["status"] != "present"]
        if missing:
            return False, (f"NOT READY: TensorRT-LLM {version} lacks what the dwdp_trtllm engine patches: "
                           f"{', '.join(missing)}; {need}, with those targets (docs/TRTLLM.md, Verified against)")
    if not rep["gpu"].get("available"):
        return False, f"NOT READY here: no CUDA GPU ({rep['gpu'].get('reason')}); TensorRT-LLM {version} itself would do"
    return True, (f"READY: TensorRT-LLM {version}, engine {m['engine']}"
                  + (f", lifecycle {rep['lifecycle']}" if m["engine"] == "dwdp_trtllm" else ""))


def add_parser(sub) -> argparse.ArgumentParser:
    from .terminal import paragraphs

    p = sub.add_parser("check-trtllm", help="report TensorRT-LLM / DWDP compatibility on this machine (exit 0 READY, "
                                            "1 NOT READY)", description=paragraphs(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dwdp", help="integration YAML (as for DWDP_TRTLLM_CONFIG) to evaluate")
    p.add_argument("--weight-dtype", choices=("bf16", "fp8", "nvfp4"), default=None,
                   help="checkpoint weight dtype (default: the config's weight_dtype, else fp8)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def _gpu() -> dict:
    try:
        import torch
        if not torch.cuda.is_available():
            return {"available": False, "reason": "torch.cuda.is_available() is False"}
        from ..integration.gemm_choice import device_sm  # the sm the adapter asks default_gemm with
        dev = torch.device("cuda", torch.cuda.current_device())
        return {"available": True, "name": torch.cuda.get_device_name(dev), "sm": device_sm(dev)}
    except Exception as e:  # noqa: BLE001 - reported
        return {"available": False, "reason": f"{type(e).__name__}: {e}"}


def _multi_buffer_status(run_moe_status: str) -> str:
    """What moe_unit.blocker will say about the installed TensorRT-LLM before any model exists: run_moe must be
    present, and the backend's int activation_type (interface.py @ 581f0712) is judged against the installed
    ActivationType.Swiglu, whose value is version dependent (moe_unit.activation_blocker)."""
    if run_moe_status == "missing" or run_moe_status.startswith("module"):
        return f"not possible: CutlassFusedMoE.run_moe {run_moe_status}"
    if run_moe_status != "present":
        return "unknown: TensorRT-LLM not importable here"
    from ..integration.trtllm import moe_unit
    enum = moe_unit.upstream_activation_enum()
    if enum is None:
        return (f"not possible: {moe_unit.ACTIVATION_ENUM_MODULE}.ActivationType is not importable, so the backend's "
                "activation_type cannot be checked to be SwiGLU")
    return ("possible where dwdp::grouped_gemm builds (`dwdp build-ops`), for SwiGLU experts without bias "
            f"(ActivationType.Swiglu = {int(enum.Swiglu)} here): CutlassFusedMoE.run_moe present")


def collect(dwdp_path: str | None = None, weight_dtype: str | None = None) -> dict:
    from ..integration.moe_evidence import gemm_order
    from ..integration.settings import choose_engine, load_integration_config, upstream_supported
    from ..spec.schema import ConfigError
    from ..integration.trtllm import targets

    rep: dict = {"tensorrt_llm": None, "patch_targets": [], "upstream_dwdp": None, "gpu": _gpu()}
    if importlib.util.find_spec("tensorrt_llm") is None:
        rep["tensorrt_llm"] = "not installed"
    else:
        try:
            targets.import_trtllm()
            rep["tensorrt_llm"] = targets.trtllm_version()
            rows = targets.report()
            rep["patch_targets"] = [{"module": m, "attribute": t.attribute, "status": s,
                                     "optional": t.optional, "lifecycle": t.lifecycle} for t, s, m in rows]
            rep["lifecycle"], rep["lifecycle_reason"] = targets.lifecycle_report(rows)
            rep["upstream_dwdp"] = targets.has_upstream_dwdp_config()
        except Exception as e:  # noqa: BLE001 - reported
            rep["tensorrt_llm"] = f"import failed: {type(e).__name__}: {e}"
    if not rep["patch_targets"]:
        rep["patch_targets"] = [{"module": t.module, "attribute": t.attribute, "status": "not checked (no tensorrt_llm)",
                                 "optional": t.optional, "lifecycle": t.lifecycle} for t in targets.PATCH_TARGETS]
        rep["lifecycle"], rep["lifecycle_reason"] = None, "unknown: TensorRT-LLM not importable here"
    cfg = load_integration_config(dwdp_path) if dwdp_path else None
    wd = weight_dtype or (cfg.dwdp.weight_dtype if cfg else "fp8")
    sm = rep["gpu"].get("sm")
    rep["upstream_can_run_here"] = upstream_supported(bool(rep["upstream_dwdp"]), sm, wd)
    try:
        engine, why = choose_engine(cfg.engine if cfg else "auto", upstream_available=bool(rep["upstream_dwdp"]),
                                    sm=sm, weight_dtype=wd)
    except ConfigError as e:  # reported, not raised: this command describes what would happen
        engine, why = "error", str(e)
    rep["our_mode"] = {"engine": engine, "reason": why, "weight_dtype": wd,
                       "gemm": gemm_order(wd, cfg.gemm_requested if cfg else None, sm) + GEMM_CHOICE_NOTE
                       if engine == "dwdp_trtllm" else
                       "upstream CuteDSL NVFP4" if engine == "upstream" else "-"}
    if engine == "dwdp_trtllm":
        row = next((t for t in rep["patch_targets"] if t["attribute"] == "CutlassFusedMoE.run_moe"), None)
        status = row["status"] if row else "unknown"
        rep["our_mode"]["gemm_requested"] = cfg.gemm_requested if cfg else None
        rep["our_mode"]["multi_buffer"] = _multi_buffer_status(status)
    ready, line = verdict(rep)
    rep["verdict"] = {"ready": ready, "line": line}
    return rep


def run(args) -> int:
    rep = collect(args.dwdp, args.weight_dtype)
    code = 0 if rep["verdict"]["ready"] else 1  # a script gates on the verdict, not on "a report was made"
    if args.json:
        print(json.dumps(rep, indent=2))
        return code
    for line in report_lines(rep):
        print(line)
    return code


def report_lines(rep: dict) -> list[str]:
    """The text report, every line within the terminal's width (commands/terminal.py, at most 80 columns): a label
    padded to 16 columns, its text wrapped under itself; patch targets grouped by module, one line each. The last
    paragraph is the verdict."""
    from .terminal import labelled, wrap

    g = rep["gpu"]
    up = rep["upstream_dwdp"]
    out = [labelled("TensorRT-LLM", str(rep["tensorrt_llm"])),
           labelled("GPU", f"{g['name']} (sm_{g['sm']})" if g.get("available") else f"none ({g['reason']})"),
           labelled("upstream DWDP", ("unknown (no tensorrt_llm)" if up is None else
                                      "present (TorchLlmArgs.dwdp_config)" if up else "absent")
                    + " - runs only on Blackwell (sm_100+) with NVFP4 weights and the CUTEDSL MoE backend; here: "
                    + ("yes" if rep["upstream_can_run_here"] else "no"))]
    statuses = {t["status"] for t in rep["patch_targets"]}
    same = next(iter(statuses)) if len(statuses) == 1 and "present" not in statuses else None
    out.append(wrap(f"patch targets{f' ({same})' if same else ''}:"))
    by_module: dict[str, list[dict]] = {}
    for t in rep["patch_targets"]:
        by_module.setdefault(t["module"], []).append(t)
    for module, ts in by_module.items():
        out.append(wrap(f"{module}:", indent="  ", hang=6))
        for t in ts:
            kind = " (lifecycle, optional)" if t["lifecycle"] else " (optional)" if t["optional"] else ""
            status = "" if same else f"{t['status']:<8} "
            out.append(wrap(f"{status}{t['attribute']}{kind}", indent="    ", hang=6))
    out.append(labelled("lifecycle", f"{rep['lifecycle'] or 'unknown'} - {rep['lifecycle_reason']}"))
    m = rep["our_mode"]
    out.append(labelled("our mode", f"engine {m['engine']} ({m['reason']}); weights {m['weight_dtype']}"))
    out.append(labelled("GEMM", m["gemm"]))
    if "multi_buffer" in m:
        out.append(labelled("multi_buffer", m["multi_buffer"]
                            + (f" (configured gemm: {m['gemm_requested']})" if m.get("gemm_requested") else "")))
    out.append(labelled("verdict", rep["verdict"]["line"]))
    return out
