"""The production choice among the FP8 grouped GEMM variants, from one tuning run (scripts/bench_fp8_grouped.py).

Pure: rows of measurements in, the choice and the C++ header (plugins/csrc/grouped_gemm_fp8_dispatch.h) out.

Rule (host-known shapes only: N, K, and rows T against experts E; never offs values):
  - a candidate is a (variant, raster, swizzle) measured at every point (T, routing) of a shape that passed every
    correctness check there (bit-exact multi_buffer == contiguous, error against the dequantised reference);
  - per (N, K) shape, the candidate with the highest geometric mean TFLOP/s over the shape's points wins;
    the incumbent (FALLBACK with CUTLASS's default knobs) is kept unless the winner beats it by more than
    KEEP_MARGIN (run-to-run noise of one run);
  - a split at T < SPLIT_ROWS_PER_EXPERT * E (few rows per expert) is made only when every candidate's output equals
    the incumbent's bit for bit at every point (then the split changes no result, only the time) and the two sides
    choose differently;
  - shapes not measured get the candidate with the best geometric mean over all points of all shapes (among those
    measured everywhere), with the same margin rule.
"""
from __future__ import annotations

import math
from collections import defaultdict

FALLBACK = "coop_128x128_c1x2"  # the first FP8 configuration; kFp8FallbackVariant in the header
KEEP_MARGIN = 0.02
SPLIT_ROWS_PER_EXPERT = 256


def cand_key(r: dict) -> tuple[str, int, int]:
    return (r["variant"], int(r["raster"]), int(r["swizzle"]))


def _gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _best(rows: list[dict], points: set) -> tuple[tuple[str, int, int], float, dict]:
    """(winner, its geomean, every candidate's geomean) among candidates correct at all `points`."""
    by = defaultdict(dict)
    for r in rows:
        by[cand_key(r)][r["point"]] = r
    scores = {}
    for c, pts in by.items():
        if set(pts) >= points and all(pts[p]["ok"] for p in points):
            scores[c] = _gmean([pts[p]["tflops"] for p in points])
    if not scores:
        return (FALLBACK, 0, 0), 0.0, {}
    win = max(scores, key=scores.get)
    inc = (FALLBACK, 0, 0)
    if inc in scores and scores[win] <= scores[inc] * (1 + KEEP_MARGIN):
        win = inc
    return win, scores[win], scores


def choose(rows: list[dict]) -> dict:
    """rows: dicts with N, K, tokens, rows, E, routing, variant, raster, swizzle, tflops, ok, same_as_fallback.
    Returns {"shapes": {(N, K): {"all": cand, "few": cand | None}}, "other": cand, "split_allowed": bool, ...}."""
    for r in rows:
        r["point"] = (r["N"], r["K"], r["tokens"], r["routing"])
    split_allowed = all(r["same_as_fallback"] for r in rows)
    shapes: dict = {}
    scores_out: dict = {}
    for nk in sorted({(r["N"], r["K"]) for r in rows}):
        rs = [r for r in rows if (r["N"], r["K"]) == nk]
        pts = {r["point"] for r in rs}
        win, _, scores = _best(rs, pts)
        entry = {"all": win, "few": None}
        scores_out[f"{nk[0]}x{nk[1]}"] = {",".join(map(str, c)): s for c, s in scores.items()}
        if split_allowed:
            few = [r for r in rs if r["rows"] < SPLIT_ROWS_PER_EXPERT * r["E"]]
            many = [r for r in rs if r["rows"] >= SPLIT_ROWS_PER_EXPERT * r["E"]]
            if few and many:
                wf, _, _ = _best(few, {r["point"] for r in few})
                wm, _, _ = _best(many, {r["point"] for r in many})
                if wf != wm:
                    entry = {"all": wm, "few": wf}
        shapes[nk] = entry
    other, _, _ = _best(rows, {r["point"] for r in rows})
    return {"shapes": shapes, "other": other, "split_allowed": split_allowed, "scores": scores_out}


def _ret(c: tuple[str, int, int]) -> str:
    return f'{{"{c[0]}", {c[1]}, {c[2]}}}'


def header(choice: dict, source: str) -> str:
    """The dispatch header for `choice` (deterministic text: the device run writes it and the same bytes are
    committed, so the library built there matches the committed sources' build key)."""
    lines = [
        "// The production choice among the FP8 grouped GEMM variants (grouped_gemm.h DWDP_FP8_VARIANTS), on host-known",
        "// shapes only (rows T, experts E, N, K), never on offs values, so the choice never waits on the GPU.",
        f"// Written by scripts/fp8_dispatch_select.py from {source}; the rule is in that file's docstring.",
        "#pragma once",
        "#include <cstdint>",
        "",
        "namespace dwdp {",
        "",
        "struct Fp8Choice {",
        "  const char* variant;",
        "  int raster;   // GroupedGemmParams::raster",
        "  int swizzle;  // GroupedGemmParams::swizzle",
        "};",
        "",
        "// Used when the chosen variant is not in the build (left out after a compile failure).",
        f'constexpr const char* kFp8FallbackVariant = "{FALLBACK}";',
        "",
        "inline Fp8Choice fp8_default_choice(int64_t T, int64_t E, int64_t N, int64_t K) {",
        f"  const bool few_rows = T < {SPLIT_ROWS_PER_EXPERT} * E;",
        "  (void)few_rows;",
    ]
    for (n, k), e in sorted(choice["shapes"].items()):
        if e["few"] is not None:
            lines.append(f"  if (N == {n} && K == {k}) return few_rows ? Fp8Choice{_ret(e['few'])} : Fp8Choice{_ret(e['all'])};")
        else:
            lines.append(f"  if (N == {n} && K == {k}) return {_ret(e['all'])};")
    lines += [f"  return {_ret(choice['other'])};", "}", "", "}  // namespace dwdp", ""]
    return "\n".join(lines)
