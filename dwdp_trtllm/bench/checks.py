"""Correctness verdicts of benchmark scripts: a benchmark that moved wrong bytes or computed wrong numbers
must exit non-zero, not only print it (the GPU check script reads exit codes)."""
from __future__ import annotations

from typing import Any


def failed_checks(result: Any, *, max_rel_err: float | None = None, path: str = "") -> list[str]:
    """Paths in a nested result (dicts / lists) where a check failed: an `exact` field that is False, a
    `relerr*` field above `max_rel_err` (when given), and every entry of an `errors` mapping."""
    bad: list[str] = []
    if isinstance(result, dict):
        for k, v in result.items():
            where = f"{path}.{k}" if path else str(k)
            if (k == "exact" or k.endswith("_exact")) and v is False:
                bad.append(where)
            elif k.startswith("relerr") and max_rel_err is not None and isinstance(v, (int, float)) and not v <= max_rel_err:
                bad.append(f"{where}={v:.3g} > {max_rel_err:g}")
            elif k == "errors" and isinstance(v, dict):
                bad.extend(f"{where}.{e}: {msg}" for e, msg in v.items())
            else:
                bad.extend(failed_checks(v, max_rel_err=max_rel_err, path=where))
    elif isinstance(result, list):
        for i, v in enumerate(result):
            bad.extend(failed_checks(v, max_rel_err=max_rel_err, path=f"{path}[{i}]"))
    return bad


def exit_code(result: Any, *, max_rel_err: float | None = None, name: str = "benchmark") -> int:
    """0 when every check passed, else 1 after printing the failed paths."""
    bad = failed_checks(result, max_rel_err=max_rel_err)
    for b in bad:
        print(f"{name}: check failed: {b}")
    return 1 if bad else 0
