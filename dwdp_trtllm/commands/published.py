"""The published-results validation: every published DWDP number we can reproduce, against `dwdp plan`.

The rows live in dwdp_trtllm/data/validation/published.yaml (its header documents the keys). Each row's setup is
a `dwdp plan` argument list, so a row is priced exactly as a user's plan is (same argument checks, calibration
selection, GPU spec files and model dims). `validate()` returns one Result per row; scripts/validate_published.py
renders them as docs/PLANNER.md's validation table; tests/unit/test_published_validation.py pins the errors.

error = prediction / published - 1 (for a published range [lo, hi]: 0 inside, else to the nearest end; for a
bound {lt: x} / {gt: x}: 0 when satisfied, else the relative miss). The range is min..max of the prediction over
the row's base arguments and each of its `vary` argument sets (the uncertain inputs).
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..spec.schema import ConfigError, load_yaml

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "validation" / "published.yaml"
#: the DEP phases a per-phase row can name (dep_share:<phase>); "others" is what the planner does not price
DEP_PHASES = ("attention", "dense_gemm", "grouped_gemm", "comm", "sync", "others")
QUANTITIES = ("speedup", "compute_over_prefetch", "tps_ratio", "prefetch_over_dwdp", "t_dep_ms", "sync_overhead",
              "slice_gain", "none") + tuple(f"dep_share:{p}" for p in DEP_PHASES)
#: slice_gain: DWDP's TPS/GPU with 2 MiB round-robin slices over unsliced copies at the row's setup (the contention
#: model's output: perf/contention.py)
SLICE_GAIN_SLICES = ("2MiB", "0")
_KEYS = {"id", "source", "what", "published", "bound", "quantity", "plan", "vary", "tolerance", "missing_effect",
         "ablation"}


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    what: str
    quantity: str
    published: float | tuple[float, float] | None = None
    bound: tuple[str, float] | None = None  # ("lt" | "gt", x)
    plan: str = ""
    vary: tuple[str, ...] = ()
    tolerance: float = 0.15
    missing_effect: str = ""
    ablation: str = ""  # `dwdp plan` arguments (merged into `plan`) that model the missing effect


@dataclass(frozen=True)
class Result:
    row: Row
    prediction: float | None
    low: float | None
    high: float | None
    error: float | None  # None: not predictable (a missing effect)
    variants: dict = field(default_factory=dict)  # argument set -> prediction
    basis: str = ""  # which inputs of the base setup were measured, stated by the row, or assumed (inputs_basis)
    verdict: str = ""  # the plan's verdict at the base setup (PlanRow.verdict: DWDP only over the whole range)
    ablation_value: float | None = None  # the prediction with the row's ablation arguments (None: no ablation)
    ablation_error: float | None = None

    @property
    def agrees(self) -> bool:
        """Within the row's tolerance; a bound (a qualitative statement) agrees only when it holds."""
        if self.error is None:
            return False
        return self.error == 0 if self.row.bound is not None else abs(self.error) <= self.row.tolerance

    @property
    def covers(self) -> bool:
        """The published number (or some point of the published range, or the bound) lies within low..high."""
        if self.low is None:
            return False
        r = self.row
        if r.bound is not None:
            return self.low < r.bound[1] if r.bound[0] == "lt" else self.high > r.bound[1]
        lo, hi = r.published if isinstance(r.published, tuple) else (r.published, r.published)
        return self.low <= hi and lo <= self.high

    @property
    def explained(self) -> bool:
        """A disagreement is explained by the effect the row names only where the planner cannot predict the quantity
        at all, or beside an ablation: the same setup with that effect modelled (`ablation`) within tolerance."""
        if not self.row.missing_effect:
            return False
        if self.error is None:
            return True
        e = self.ablation_error
        return e is not None and (e == 0 if self.row.bound is not None else abs(e) <= self.row.tolerance)


def _row(d: dict, file: str, i: int) -> Row:
    where = f"[{i}]"
    if not isinstance(d, dict):
        raise ConfigError(file, where, f"expected a mapping, got {d!r}")
    unknown = sorted(set(d) - _KEYS)
    if unknown:
        raise ConfigError(file, f"{where}.{unknown[0]}", f"unknown key; expected one of {', '.join(sorted(_KEYS))}")
    for k in ("id", "source", "what", "quantity"):
        if not isinstance(d.get(k), str) or not d[k]:
            raise ConfigError(file, f"{where}.{k}", f"expected a non-empty string, got {d.get(k)!r}")
    if d["quantity"] not in QUANTITIES:
        raise ConfigError(file, f"{where}.quantity", f"expected one of {', '.join(QUANTITIES)}, got {d['quantity']!r}")
    pub, bound = d.get("published"), d.get("bound")
    if isinstance(pub, list):
        if len(pub) != 2 or not all(isinstance(x, (int, float)) for x in pub) or pub[0] > pub[1]:
            raise ConfigError(file, f"{where}.published", f"expected a number or [lo, hi], got {pub!r}")
        pub = (float(pub[0]), float(pub[1]))
    elif pub is not None and (isinstance(pub, bool) or not isinstance(pub, (int, float)) or pub <= 0):
        raise ConfigError(file, f"{where}.published", f"expected a positive number or [lo, hi], got {pub!r}")
    if bound is not None:
        if not (isinstance(bound, dict) and len(bound) == 1 and set(bound) <= {"lt", "gt"}):
            raise ConfigError(file, f"{where}.bound", f"expected {{lt: x}} or {{gt: x}}, got {bound!r}")
        bound = next(iter(bound.items()))
    if (pub is None) == (bound is None):
        raise ConfigError(file, where, "expected exactly one of `published` and `bound`")
    if d["quantity"] != "none" and not isinstance(d.get("plan"), str):
        raise ConfigError(file, f"{where}.plan", "expected the `dwdp plan` arguments of the published setup")
    if d["quantity"] == "none" and not d.get("missing_effect"):
        raise ConfigError(file, f"{where}.missing_effect", "a row the planner cannot predict must name the missing effect")
    if d.get("ablation") is not None and (not isinstance(d["ablation"], str) or not d.get("missing_effect")):
        raise ConfigError(file, f"{where}.ablation", "expected the `dwdp plan` arguments that model the row's "
                                                     f"missing_effect (a string, beside missing_effect), got {d['ablation']!r}")
    vary = d.get("vary") or []
    if not isinstance(vary, list) or not all(isinstance(v, str) for v in vary):
        raise ConfigError(file, f"{where}.vary", f"expected a list of argument strings, got {vary!r}")
    return Row(id=d["id"], source=d["source"], what=d["what"], quantity=d["quantity"],
               published=float(pub) if isinstance(pub, (int, float)) else pub, bound=bound, plan=d.get("plan") or "",
               vary=tuple(vary), tolerance=float(d.get("tolerance", 0.15)), missing_effect=d.get("missing_effect") or "",
               ablation=d.get("ablation") or "")


def load_rows(path: str | Path = DATA_FILE) -> list[Row]:
    data = load_yaml_list(path)
    rows = [_row(d, str(path), i) for i, d in enumerate(data)]
    ids = [r.id for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(str(path), dup[0], "id given twice")
    return rows


def load_yaml_list(path: str | Path) -> list:
    """The data file is a YAML list; schema.load_yaml reads mappings, so wrap it."""
    from ..spec.yaml_safe import safe_load

    p = Path(path)
    if not p.is_file():
        return load_yaml(p)  # raises the one-line "file not found"
    data = safe_load(p.read_text(encoding="utf-8"), file=str(p))
    if not isinstance(data, list):
        raise ConfigError(str(p), "", f"expected a list of rows, got {type(data).__name__}")
    return data


def _merge(base: list[str], extra: list[str]) -> list[str]:
    """`base` with the options in `extra` replacing the same options (flags without a value are appended)."""
    out, i = list(base), 0
    while i < len(extra):
        opt = extra[i]
        takes = i + 1 < len(extra) and not extra[i + 1].startswith("--")
        if opt in out:
            j = out.index(opt)
            has = j + 1 < len(out) and not out[j + 1].startswith("--")
            del out[j:j + (2 if has else 1)]
        out += extra[i:i + (2 if takes else 1)]
        i += 2 if takes else 1
    return out


def _phases(spec, r) -> dict[str, float]:
    """DEP phases of a plan row in us, split as the planner prices them (perf.planner.phases: attention core, GEMMs of
    projections + shared experts + router, memory-bound remainder) plus the row's experts, communication and sync."""
    from ..perf.planner import phases, routing_skew, sampled_load

    load = sampled_load(spec, r.isl, r.dwdp_size)
    ph = phases(spec, load, r.dwdp_size, r.isl, routing_skew(spec, r.dwdp_size, r.tokens_per_rank))
    return {"attention": float(ph.core_SR.mean()), "dense_gemm": float(ph.gemm_SR.mean()),
            "grouped_gemm": r.t_experts_dep_us, "comm": r.t_all2all_us, "sync": r.t_sync_us,
            "others": float(ph.membound_SR.mean())}


def _own_range(r, quantity: str) -> tuple[float, float] | None:
    """The planner's own range of the quantity (its uncertain inputs), where the row carries one."""
    if quantity == "speedup" and getattr(r, "speedup_low", None) is not None:
        return float(r.speedup_low), float(r.speedup_high)
    rng = getattr(r, "t_dep_us_range", None)
    if quantity == "t_dep_ms" and rng:
        return float(rng[0]) / 1e3, float(rng[1]) / 1e3
    return None


def inputs_basis(spec, row=None) -> str:
    """'measured: ...; stated: ...; assumed: ...' for one planned setup: compute priced from TensorRT-LLM's measured
    kernel tables or from the GPU spec's efficiencies (assumed where the spec file marks them ASSUMPTION), and each
    uncertain input (perf/inputs.py) measured, stated by the row's arguments, or a prior (extrapolated table cells
    only where `row` reached past a table)."""
    from ..perf import inputs
    from ..perf.hardware import assumed_keys

    measured, stated, assumed = [], [], []
    if spec.tables is not None:
        measured.append("compute (TensorRT-LLM kernel tables)")
    spec_assumed = [k for k in assumed_keys(spec.gpu) if spec.tables is None or k in ("copy_efficiency",)]
    if spec_assumed:
        assumed.append(f"{spec.gpu.name} spec {'/'.join(spec_assumed)}")
    elif spec.tables is None:
        stated.append(f"compute ({spec.gpu.name} spec efficiencies, none marked ASSUMPTION)")
    for s in inputs.statuses(spec):
        if s.name == "extrapolated table cells" and not (row is not None and row.extrapolated):
            continue
        {"measured": measured, "given": stated, "prior": assumed}[s.status].append(s.name)
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in (("measured", measured), ("stated", stated),
                                                           ("assumed", assumed)) if v)


def _one_row(argv: list[str]):
    from ..cli import build_parser
    from ..perf.planner import plan
    from .plan import build_spec

    spec = build_spec(build_parser().parse_args(["plan", *argv]))
    rows = [r for r in plan(spec) if r.dep_variant == spec.dep_variants[0]]  # --dep names another; default trtllm
    if len(rows) != 1:
        raise ConfigError(None, "plan", f"a validation row plans one point; {' '.join(argv)!r} gives {len(rows)}")
    return spec, rows[0]


def predict_range(argv: list[str], quantity: str) -> tuple[float, float, float, str, str]:
    """(value, low, high, basis, verdict): the planner's value of `quantity` for the `dwdp plan` arguments `argv` (one
    G, one ISL), the planner's own range for it (value, value where it states none), inputs_basis of the setup and
    the plan's verdict there (slice_gain: the sliced setup's)."""
    if quantity == "slice_gain":  # the same setup with and without slices
        (spec, a), (_, b) = (_one_row(_merge(argv, ["--slice-bytes", s])) for s in SLICE_GAIN_SLICES)
        v = a.tps_per_gpu_dwdp / b.tps_per_gpu_dwdp
        return v, v, v, inputs_basis(spec, a), a.verdict
    spec, r = _one_row(argv)
    if quantity.startswith("dep_share:"):
        v = _phases(spec, r)[quantity.split(":", 1)[1]] / r.t_dep_us
    else:
        v = {"speedup": r.speedup, "compute_over_prefetch": r.compute_over_prefetch,
             "tps_ratio": r.tps_per_gpu_dwdp / r.tps_per_gpu_dep, "prefetch_over_dwdp": r.t_prefetch_us / r.t_dwdp_us,
             "t_dep_ms": r.t_dep_us / 1e3, "sync_overhead": r.sync_overhead}[quantity]
    lo, hi = _own_range(r, quantity) or (v, v)
    return v, min(lo, v), max(hi, v), inputs_basis(spec, r), r.verdict


def error_of(row: Row, value: float) -> float:
    """Relative error of `value` against the row's published number, range or bound (0 = agreement)."""
    if row.bound is not None:
        op, x = row.bound
        ok = value < x if op == "lt" else value > x
        return 0.0 if ok else value / x - 1
    if isinstance(row.published, tuple):
        lo, hi = row.published
        return 0.0 if lo <= value <= hi else (value / lo - 1 if value < lo else value / hi - 1)
    return value / row.published - 1


def evaluate(row: Row, root: Path | None = None) -> Result:
    """One row: the prediction at the base arguments, its range over the variants, the error."""
    if row.quantity == "none":
        return Result(row, None, None, None, None)
    base = shlex.split(row.plan)
    if root is not None:  # model / spec paths in the data file are relative to the source checkout
        base = [str(root / a) if a.startswith("dwdp_trtllm/data/") else a for a in base]
    pred, lo, hi, basis, verdict = predict_range(base, row.quantity)
    values = {row.plan: pred}
    ends = [lo, hi]
    for v in row.vary:
        values[v], vlo, vhi, _, _ = predict_range(_merge(base, shlex.split(v)), row.quantity)
        ends += [vlo, vhi]
    finite = [x for x in ends if math.isfinite(x)]
    abl = predict_range(_merge(base, _rooted(shlex.split(row.ablation), root)), row.quantity)[0] if row.ablation else None
    return Result(row, pred, min(finite), max(finite), error_of(row, pred), values, basis, verdict, abl,
                  None if abl is None else error_of(row, abl))


def _rooted(args: list[str], root: Path | None) -> list[str]:
    """Data-file paths (dwdp_trtllm/data/...) relative to the source checkout."""
    return [str(root / a) if root is not None and a.startswith("dwdp_trtllm/data/") else a for a in args]


def validate(path: str | Path = DATA_FILE) -> list[Result]:
    root = Path(__file__).resolve().parents[2]
    return [evaluate(r, root) for r in load_rows(path)]


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


def _published(row: Row) -> str:
    if row.bound is not None:
        return ("< " if row.bound[0] == "lt" else "> ") + _fmt(row.bound[1])
    if isinstance(row.published, tuple):
        return f"{_fmt(row.published[0])}-{_fmt(row.published[1])}"
    return _fmt(row.published)


def _explanation(res: Result) -> str:
    """The named effect, with its ablation's value and error; an explanation of a predicted row without an ablation
    is shown as not counted (Result.explained)."""
    r = res.row
    if not r.missing_effect or res.error is None:
        return r.missing_effect or ""
    if res.ablation_value is None:
        return f"{r.missing_effect} (no ablation row: not counted as explained)"
    ok = "within" if res.explained else "still outside"
    return (f"{r.missing_effect}; ablation `{r.ablation}`: {_fmt(res.ablation_value)} ({res.ablation_error:+.0%}, "
            f"{ok} ±{r.tolerance:.0%})")


def markdown(results: list[Result]) -> str:
    """docs/PLANNER.md's validation table (one row per published number)."""
    lines = ["| id | published number (source) | published | predicted (range) | plan verdict | error | within | published in range | inputs measured / stated / assumed | inputs (`dwdp plan` ...) | disagreement explained by |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        r = res.row
        pred = "-" if res.prediction is None else f"{_fmt(res.prediction)} ({_fmt(res.low)}-{_fmt(res.high)})"
        err = "-" if res.error is None else f"{res.error:+.0%}"
        ok = "n/a" if res.error is None else ("yes" if res.agrees else "**no**")
        if res.error is not None and "assumed: " in res.basis:
            ok += ", on assumed inputs"
        tol = "bound" if r.bound is not None else f"±{r.tolerance:.0%}"
        inputs = f"`{r.plan}`" + (" vary: " + "; ".join(f"`{v}`" for v in r.vary) if r.vary else "")
        inside = "-" if res.prediction is None else ("yes" if res.covers else "no")
        lines.append(f"| {r.id} | {r.what} ({r.source}) | {_published(r)} | {pred} | {res.verdict or '-'} | {err} | {ok} ({tol}) | {inside} "
                     f"| {res.basis or '-'} | {inputs if r.plan else '-'} | {_explanation(res)} |")
    return "\n".join(lines) + "\n"
