"""Which of the planner's uncertain inputs a plan measured, was told, or assumes (pure).

An input is
- measured iff a loaded calibration file or bench result sets the Calibration field it reads (FIELDS;
  perf/calibration.py's loader fields), and the plan names the file;
- given iff the user stated it with its flag (FLAGS: `--dep-comm`, `--routing-skew`, `--interference`);
- else a prior: the plan carries it as a range (perf/uncertainty.py) and a verdict is DWDP or DEP only when it holds
  over the whole range.
A loaded field the plan's pricing does not read (the compute fields where TensorRT-LLM's kernel tables price compute:
TABLE_PRICED) makes nothing measured: the inputs line lists its file as "not used by --target trtllm" (not_used).
Extrapolated kernel-table cells are a prior wherever a row reached past a table's last row (PlanRow.extrapolated):
no file measures them today. Measured and given inputs are fixed at their value (uncertainty.scenario's `fixed`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .uncertainty import INPUTS

#: the Calibration fields that make an input measured
FIELDS = {"interference": ("interference", "interference_by_phase"), "peer bandwidth": ("peer_copy_gbps",),
          "DEP communication": ("all_to_all_gbps",),
          "compute efficiencies": ("grouped_gemm_tflops", "attention_tflops", "attention_us_by_isl", "hbm_tbps",
                                   "floor_tflops")}
#: the Calibration fields a plan priced from TensorRT-LLM's kernel tables does not read (the tables price compute;
#: perf/phases.trtllm_phases): a file that sets only these changes no number under --target trtllm
TABLE_PRICED = FIELDS["compute efficiencies"] + ("engine_over_floor",)
#: GPU spec keys whose ASSUMPTION mark makes compute efficiencies a prior (target engine)
EFF_KEYS = ("gemm", "attention", "hbm")
#: the flag that states an input
FLAGS = {"interference": "--interference", "DEP communication": "--dep-comm", "routing": "--routing-skew"}
#: where each prior comes from (docs/PLANNER.md "Uncertainty")
PRIOR_SOURCES = {
    "interference": "paper / blog 19 Table 3 per-phase slowdowns, half to 1.5x each excess",
    "peer bandwidth": "the GPU spec's copy efficiency",
    "DEP communication": "the paths TensorRT-LLM selects among on this GPU",
    "routing": "balanced to the tables' power_law_1.01",
    "extrapolated table cells": "5% per doubling past the last row",
    "compute efficiencies": "the GPU spec's ASSUMPTION efficiencies, x0.75 to x1.25",
}


@dataclass(frozen=True)
class InputStatus:
    name: str  # one of uncertainty.INPUTS
    status: str  # measured | given | prior
    source: str  # the file(s) that measured it, the flag and value stated, or the prior's source


def _files(spec, names: tuple[str, ...]) -> str | None:
    """The calibration file(s) that set any of `names` (PlanSpec.provenance: (field, file) pairs from the loader), or
    the calibration's sources when the fields are set without a recorded file; None when none is set."""
    cal = spec.calibration
    names = tuple(n for n in names if n not in unread_fields(spec))
    if not any(getattr(cal, n, None) not in (None, (), {}) for n in names):
        return None
    files = [f for field, f in spec.provenance if field in names]
    return ", ".join(dict.fromkeys(files)) or ", ".join(cal.sources) or "a calibration"


def unread_fields(spec) -> tuple[str, ...]:
    """The Calibration fields this plan's pricing does not read: the compute fields where TensorRT-LLM's kernel tables
    price compute (TABLE_PRICED), none on the engine target."""
    return TABLE_PRICED if spec.tables is not None else ()


def not_used(spec) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(file, fields it sets) for every loaded file with fields this plan does not read (unread_fields), in load
    order: what the inputs line lists as "not used by --target X" instead of measured."""
    unread = unread_fields(spec)
    out: dict[str, list[str]] = {}
    for name, f in spec.provenance:
        if name in unread:
            out.setdefault(f, []).append(name)
    return tuple((f, tuple(dict.fromkeys(v))) for f, v in out.items())


def statuses(spec) -> tuple[InputStatus, ...]:
    """Every uncertain input's status for this plan, in uncertainty.INPUTS order."""
    stated = dict(spec.stated)
    out = []
    for name in INPUTS:
        files = _files(spec, FIELDS.get(name, ()))
        if name == "compute efficiencies" and files is None:
            files = _compute_source(spec)
        if files is not None:
            out.append(InputStatus(name, "measured", files))
        elif name in stated:
            out.append(InputStatus(name, "given", f"{FLAGS[name]} {stated[name]}"))
        else:
            out.append(InputStatus(name, "prior", PRIOR_SOURCES[name]))
    return tuple(out)


def _compute_source(spec) -> str | None:
    """Where compute comes from when no calibration measures it: TensorRT-LLM's measured kernel tables, a floor
    campaign, or a GPU spec with no ASSUMPTION on its efficiencies; None (a prior) where the spec assumes them."""
    from .hardware import assumed_keys

    if spec.tables is not None:
        return "TensorRT-LLM kernel tables"
    if spec.calibration.floor.points:
        return "the engine's floor campaign"
    if any(k in EFF_KEYS for k in assumed_keys(spec.gpu)):
        return None
    return f"{spec.gpu.source or spec.gpu.name} (datasheet / measured / public report)"


def fixed(spec) -> frozenset:
    """The inputs the range does not vary: measured or given."""
    return frozenset(s.name for s in statuses(spec) if s.status != "prior")


def is_measured(spec, name: str) -> bool:
    return any(s.name == name and s.status == "measured" for s in statuses(spec))


def line(spec, rows=()) -> str:
    """'inputs: measured: peer bandwidth (cal.json); given: routing (--routing-skew none); priors (ranged): ...'
    (extrapolated cells listed as a prior only where a row reached past a table)."""
    extrap = any(r.extrapolated for r in rows)
    parts: dict[str, list[str]] = {"measured": [], "given": [], "prior": []}
    for s in statuses(spec):
        if s.name == "extrapolated table cells" and not extrap:
            continue
        if s.name == "compute efficiencies" and s.status == "measured" and not s.source.endswith(".json"):
            continue  # compute from the tables or a sourced spec: said by the "priced:" line
        parts[s.status].append(s.name if s.status == "prior" else f"{s.name} ({s.source})")
    out = [f"{k if k != 'prior' else 'priors (ranged)'}: {', '.join(v)}" for k, v in parts.items() if v]
    unused = not_used(spec)
    if unused:
        out.append(f"not used by --target {spec.target}: " + ", ".join(f"{f} ({', '.join(v)})" for f, v in unused)
                   + " (compute is priced from TensorRT-LLM's kernel tables)")
    return "inputs: " + "; ".join(out)


def to_dict(spec) -> list[dict]:
    return [{"input": s.name, "status": s.status, "source": s.source} for s in statuses(spec)]
