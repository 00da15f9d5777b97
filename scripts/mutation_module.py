"""Mutation-test one module against the fast test files that cover it (docs/ARCHITECTURE.md "Testing").

`mutmut run` over all four mutated areas takes hours on a small machine. This script measures one module at a time:
it copies the checkout (tracked and untracked, not ignored, files) to a work folder, narrows `[tool.mutmut]` there to
the module and the given test files, runs `mutmut run`, and prints the counts `mutmut export-cicd-stats` reports
(total / killed / survived / no tests / timeout) and the kill rate. The checkout itself is never modified.

    python scripts/mutation_module.py dwdp_trtllm/perf/planner.py \
        tests/unit/test_pinned_values.py tests/unit/test_perf_planner.py --max-children 2

`--mutants GLOB` (repeatable) runs only the mutants whose names match, e.g. "*.x_iteration_times__mutmut_*" (names
as `mutmut results` lists them); `--survivors` also prints each surviving mutant's name (`mutmut show NAME` in the
work folder prints its diff).
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _copy_checkout(dest: Path) -> None:
    """Copy the files git tracks or would track (not the ignored ones: no mutants/, caches) to `dest`."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if not src.is_file():
            continue  # a deleted-but-tracked file
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)


def _narrow_config(pyproject: Path, module: str, tests: list[str]) -> None:
    """Point `[tool.mutmut]`'s only_mutate at `module` and its test selection at `tests` (fast subset kept)."""
    text = pyproject.read_text()
    text, n_only = re.subn(r"(?m)^only_mutate = .*$", f"only_mutate = {json.dumps([module])}", text)
    selection = json.dumps(tests + ["-m", "not slow and not gpu"])
    text, n_sel = re.subn(r"(?m)^pytest_add_cli_args_test_selection = .*$",
                          f"pytest_add_cli_args_test_selection = {selection}", text)
    if n_only != 1 or n_sel != 1:
        sys.exit("pyproject.toml: [tool.mutmut] needs one only_mutate and one pytest_add_cli_args_test_selection line")
    pyproject.write_text(text)


#: mutmut 3.8's exit codes (mutmut/stats.py status_by_exit_code): 1 and 3 kill, 0 survives, 5 / 33 no tests
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "not covered", 33: "not covered", 34: "skipped",
           36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}


def _results(work: Path, module: str, patterns: list[str]) -> dict[str, str]:
    """Mutant name -> status, from mutmut's record of the module (mutants/<module>.meta)."""
    meta = json.loads((work / "mutants" / (module + ".meta")).read_text())
    prefix = Path(module).with_suffix("").as_posix().replace("/", ".")
    out = {}
    for key, code in meta["exit_code_by_key"].items():
        name = key if key.startswith(prefix) else f"{prefix}.{key}"
        if not patterns or any(fnmatch.fnmatch(name, p) for p in patterns):
            out[name] = _STATUS.get(code, "suspicious")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="file to mutate, e.g. dwdp_trtllm/perf/planner.py")
    ap.add_argument("tests", nargs="+", help="test files whose tests may kill its mutants")
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="work folder (default: $TMPDIR/dwdp-mutmut/<module stem>; replaced if present)")
    ap.add_argument("--survivors", action="store_true", help="list the surviving mutants' names")
    ap.add_argument("--mutants", action="append", default=[], metavar="GLOB",
                    help="run only the mutants whose names match (repeatable)")
    args = ap.parse_args(argv)
    for path in [args.module, *args.tests]:
        if not (ROOT / path).is_file():
            print(f"{path}: no such file in {ROOT}", file=sys.stderr)
            return 2
    stem = Path(args.module).with_suffix("").as_posix().replace("/", ".")
    work = args.workdir or Path(os.environ.get("TMPDIR", "/tmp")) / "dwdp-mutmut" / stem
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    _copy_checkout(work)
    _narrow_config(work / "pyproject.toml", args.module, args.tests)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutmut puts mutants/ first itself
    mutmut = [sys.executable, "-m", "mutmut"]
    subprocess.run([*mutmut, "run", "--max-children", str(args.max_children), *args.mutants], cwd=work, env=env,
                   check=False)
    res = _results(work, args.module, args.mutants)
    n = collections.Counter(res.values())
    total, killed = len(res), n["killed"]
    scope = f" ({', '.join(args.mutants)})" if args.mutants else ""
    print(f"{args.module}{scope}: {total} mutants, {killed} killed ({100 * killed / max(total, 1):.0f}%), "
          f"{n['survived']} survived, {n['not covered']} not covered, {n['timeout']} timed out, "
          f"{n['not checked']} not checked [{' '.join(args.tests)}]")
    if args.survivors:
        print("\n".join(f"  survived: {k}" for k, v in sorted(res.items()) if v == "survived"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
