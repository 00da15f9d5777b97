#!/usr/bin/env python3
"""Adopt a new `dwdp bench --floor` campaign as the planner's engine calibration, and show how DWDP/DEP moved.

    python3 scripts/dev/adopt_floor_campaign.py SRC NAME      # SRC: gpu_check.sh calib's output (a directory or a .tar.gz)
    python3 scripts/dev/adopt_floor_campaign.py --table AFTER_DIR   # only print the before/after table (nothing written)
    python3 scripts/dev/adopt_floor_campaign.py --before OLD SRC NAME   # the table's before: docs/bench_results/OLD, not
        # the campaign shipped so far (e.g. the last one before a change, when the shipped one only re-measured it)

SRC holds perf_check.sh's points as <point>/results.json (POINTS; tarballs inside SRC are unpacked first). Each file is
checked before anything is written (one line naming the file and what was expected, exit 2): a floor run on one rank
of an H200, BF16 experts for b*, FP8 experts with FP8 linear layers for f*, measured within MAX_SPAN_H of each other (one run), and
together a complete campaign (perf/floor_calibration.complete); NAME and --before are plain directory names (exit 2
otherwise). Then everything below is computed (the table and the matrix against the staged campaign), written beside
its place and renamed into it last, so that a failure on the way leaves the repository as it was:
  - docs/bench_results/NAME/<point>.json: the files byte for byte (and bench.log when SRC has one);
  - dwdp_trtllm/data/engine_calibration/NAME/: the same bytes, replacing the campaign shipped so far (one campaign);
  - the campaign's name in data/engine_calibration/README.md and in tests/unit/test_perf_trtllm_target.py's pin;
  - docs/PLANNER.md: the before/after table (section 4c, between its markers) and the deployment matrix (4b);
  - stdout: the measured points in docs/BENCHMARKS.md's table format (engine vs floor per phase), for its section.
Then run `python3 -m pytest -q tests/unit/test_perf_trtllm_target.py tests/unit/test_perf_floor_validation.py
tests/unit/test_plan_recalibration.py` and commit those paths.

The before/after table is `dwdp plan --target engine` (BEFORE_AFTER's commands) calibrated by the campaign shipped
before (docs/bench_results/<old>, or --before's) and by the new one: predictions from single-H200 floor measurements, not a
multi-GPU measurement.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import sys
import tarfile
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # this checkout's package, also where it is not installed
POINTS = ("b2", "b8", "b32", "f2", "f8", "f32")
#: (what, `dwdp plan` arguments): DeepSeek-R1 FP8 on 8x H200, and section 3's smoke shape (2 ranks, 3 layers) in FP8
#: and in BF16 (whose linear layers FP8 does not touch: the control)
BEFORE_AFTER = (
    ("R1 FP8, 8x H200, MNT 16K", "--model deepseek-r1 --gpu h200 --weight-dtype fp8 --dwdp-size 8 --mnt 16384 "
                                 "--isl 4096,8192,16384,32768"),
    ("R1 FP8, 8x H200, MNT 32K", "--model deepseek-r1 --gpu h200 --weight-dtype fp8 --dwdp-size 8 --mnt 32768 "
                                 "--isl 8192,32768"),
    ("smoke shape, FP8", "--model deepseek-r1 --num-layers 3 --gpu h200 --weight-dtype fp8 --dwdp-size 2 --mnt 16384 "
                         "--isl 4096 --isl-dist uniform_ratio --imbalance-cv 0.2"),
    ("smoke shape, BF16", "--model deepseek-r1 --num-layers 3 --gpu h200 --weight-dtype bf16 --dwdp-size 2 --mnt 16384 "
                          "--isl 4096 --isl-dist uniform_ratio --imbalance-cv 0.2"),
)
#: the six points of one campaign are one device call's run (gpu_check.sh calib: a few minutes)
MAX_SPAN_H = 1.0
MARKS = {"table": ("<!-- recalibration:begin -->", "<!-- recalibration:end -->"),
         "matrix": ("<!-- plan-matrix:begin -->", "<!-- plan-matrix:end -->")}


class Refused(Exception):
    """One line: the file (or argument) and what was expected."""


def shipped(repo: Path) -> Path:
    """The campaign directory shipped in the package (exactly one)."""
    dirs = sorted(p for p in (repo / "dwdp_trtllm/data/engine_calibration").iterdir() if p.is_dir())
    if len(dirs) != 1:
        raise Refused(f"dwdp_trtllm/data/engine_calibration: expected one campaign directory, found {len(dirs)}")
    return dirs[0]


def find_points(src: Path, tmp: Path) -> tuple[dict[str, Path], Path | None]:
    """{point: results.json} under `src` (tarballs unpacked into `tmp`, nested ones too), and a bench.log if any."""
    root = tmp / "src"
    if src.is_dir():
        shutil.copytree(src, root)
    elif src.is_file() and tarfile.is_tarfile(src):
        root.mkdir()
        shutil.copyfile(src, root / "src.tar.gz")
    else:
        raise Refused(f"{src}: expected a directory or a .tar.gz of gpu_check.sh calib's output")
    done: set[Path] = set()
    while todo := [t for t in sorted(root.rglob("*.tar.gz")) if t not in done]:  # raw.tar.gz inside raw.tar.gz
        for t in todo:
            done.add(t)
            with tarfile.open(t) as f:
                f.extractall(t.parent / (t.name + ".d"), filter="data")
    found: dict[str, Path] = {}
    cands = [p for p in sorted(root.rglob("results.json")) if p.parent.name in POINTS]
    calib = [p for p in cands if "calib" in p.relative_to(root).parts]  # gpu_check.sh's calib section among others
    for p in calib or cands:
        if p.parent.name in found:
            raise Refused(f"{src}: two {p.parent.name}/results.json ({found[p.parent.name].relative_to(root)}, "
                          f"{p.relative_to(root)}): expected one campaign")
        found[p.parent.name] = p
    missing = [p for p in POINTS if p not in found]
    if missing:
        raise Refused(f"{src}: expected {', '.join(f'{p}/results.json' for p in POINTS)}; missing {', '.join(missing)}")
    logs = sorted(root.rglob("bench.log"), key=lambda q: "calib" not in q.relative_to(root).parts)
    return found, (logs[0] if logs else None)


def check(found: dict[str, Path]) -> str:
    """Refuse what is not this campaign's point; the campaign's completeness text when it is one."""
    from datetime import datetime

    from dwdp_trtllm.perf.calibration import calibration_from_bench
    from dwdp_trtllm.perf.floor_calibration import complete
    from dwdp_trtllm.perf.floor_points import linear_dtype

    points, dates = [], {}
    for name, path in found.items():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            run = data["runs"][0]
            cfg, floor = run["config"], run["floor"]
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            raise Refused(f"{path}: expected a dwdp bench --floor results.json ({e.__class__.__name__}: {e})") from None
        want = ("fp8", "fp8") if name.startswith("f") else ("bf16", "bf16")  # (experts, linear layers)
        got = (cfg.get("dwdp", {}).get("weight_dtype"), linear_dtype(floor))
        if got != want:
            raise Refused(f"{path}: point {name} expects {want[0]} experts and {want[1]} linear layers (floor.linear_layers), "
                          f"got {got[0]} and {got[1]}")
        try:
            dates[name] = datetime.fromisoformat(run["env"]["date"])
        except (KeyError, TypeError, ValueError):
            raise Refused(f"{path}: expected env.date (ISO time) in its run") from None
        if cfg.get("run", {}).get("ranks") != 1 or "H200" not in str(run.get("env", {}).get("device_name")):
            raise Refused(f"{path}: expected one rank on an NVIDIA H200, got run.ranks {cfg.get('run', {}).get('ranks')} "
                          f"on {run.get('env', {}).get('device_name')}")
        points += calibration_from_bench(data, file=str(path)).floor.points
    span = (max(dates.values()) - min(dates.values())).total_seconds() / 3600
    if span > MAX_SPAN_H:  # one campaign is one session's run: rates and efficiencies of one engine, one floor method
        raise Refused(f"{', '.join(POINTS)}: measured {span:.1f} h apart ({min(dates, key=dates.get)} "
                      f"{min(dates.values()):%H:%M}, {max(dates, key=dates.get)} {max(dates.values()):%H:%M}); "
                      f"expected one run (within {MAX_SPAN_H} h)")
    ok, held = complete(points)
    if not ok:
        raise Refused(f"{', '.join(POINTS)}: not a complete campaign: {held}")
    return held


def bench_table(found: dict[str, Path]) -> str:
    """The campaign's per-point engine-vs-floor rows in docs/BENCHMARKS.md's format (ms per iteration, mean over the
    measured iterations; x = measured / floor of the mean; median = median over iterations of measured / floor)."""
    out = ["| point | mode | floor: attn / experts / other / iteration | measured: attn / experts / other / iteration | "
           "x attn | x experts | x other | **x iteration** | median x iteration |", "|---|---|---|---|---|---|---|---|---|"]
    for name in POINTS:
        run = json.loads(found[name].read_text(encoding="utf-8"))["runs"][0]
        wl = run["config"]["workload"]
        what = (f"{'FP8 experts + FP8 linears' if name.startswith('f') else 'BF16'}, ISL {wl['isl'] // 1024}K, "
                f"MNT {wl['max_num_tokens'] // 1024}K")
        for mode, f in run["floor"].items():
            if not isinstance(f, dict) or "floor_ms" not in f:
                continue
            fl, me = f["floor_ms"], f["measured_ms"]
            x = {k: me[k] / fl[k] for k in ("attention", "expert_gemm", "other", "total")}
            med = (f.get("measured_over_floor_median") or {}).get("total")
            out.append(f"| {what} | {mode} | " + " / ".join(f"{fl[k]:.1f}" for k in ("attention", "expert_gemm", "other", "total"))
                       + " | " + " / ".join(f"{me[k]:.1f}" for k in ("attention", "expert_gemm", "other", "total"))
                       + f" | {x['attention']:.2f} | {x['expert_gemm']:.2f} | {x['other']:.2f} | **{x['total']:.2f}** | "
                       + (f"{med:.2f}" if med else "-") + " |")
    dates = sorted(json.loads(found[p].read_text(encoding="utf-8"))["runs"][0]["env"].get("date", "") for p in POINTS)
    return "\n".join(out) + f"\n\n(runs {dates[0]} .. {dates[-1]})\n"


def _plan(argv: list[str]):
    from dwdp_trtllm.cli import build_parser
    from dwdp_trtllm.commands import plan as plan_cmd
    from dwdp_trtllm.perf.planner import plan
    from dwdp_trtllm.perf.recommend import recommend

    spec = plan_cmd.build_spec(build_parser().parse_args(["plan", *argv]))
    rows = plan(spec)
    return spec, rows, recommend(spec, rows)


def table(before: Path, after: Path, after_label: str | None = None) -> str:
    """Markdown: per BEFORE_AFTER shape and ISL, T_compute / T_DEP / T_DWDP per MoE layer and DWDP/DEP (range, verdict)
    calibrated by `before` and by `after`, with the exact commands."""
    out = ["| shape | ISL | campaign | T_compute ms | T_DEP ms | T_DWDP ms | DWDP/DEP (range) | verdict |",
           "|---|---|---|---|---|---|---|---|"]
    cmds = []
    for what, args in BEFORE_AFTER:
        res = {}
        for label, d in (("before", before), ("after", after)):
            res[label] = _plan([*args.split(), "--target", "engine", "--bench-results", str(d)])
        for i, isl in enumerate(res["before"][0].isls):
            for label in ("before", "after"):
                spec, rows, _ = res[label]
                r = rows[i]
                name = (after_label or after.name) if label == "after" else before.name
                out.append(f"| {what} | {isl} | {label}: {name} | {r.t_compute_us / 1e3:.2f} | {r.t_dep_us / 1e3:.2f} | "
                           f"{r.t_dwdp_us / 1e3:.2f} | {r.speedup:.2f} ({r.speedup_low:.2f}-{r.speedup_high:.2f}) | "
                           f"{r.verdict} |")
        cmds.append(f"dwdp plan {args} --target engine   # after (the shipped campaign); before: "
                    f"--bench-results docs/bench_results/{before.name}")
    return "\n".join(out) + "\n\n```\n" + "\n".join(cmds) + "\n```\n"


def matrix(campaign: Path) -> str:
    """Section 4b's deployment matrix with the engine target calibrated by `campaign` (the staged directory, before
    anything is written)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import plan_matrix

    buf = io.StringIO()
    with redirect_stdout(buf):
        plan_matrix.main(bench_results=campaign)
    return buf.getvalue()


def replace_between(text: str, key: str, body: str, where: str) -> str:
    a, b = MARKS[key]
    if text.count(a) != 1 or text.count(b) != 1:
        raise Refused(f"{where}: expected one {a} and one {b}")
    head, rest = text.split(a)
    return head + a + "\n" + body.rstrip("\n") + "\n" + b + rest.split(b, 1)[1]


def plain_name(name: str, what: str) -> str:
    """`name` when it is one plain directory name (letters, digits, . _ -; not . or ..), else Refused: it becomes
    docs/bench_results/<name> and dwdp_trtllm/data/engine_calibration/<name>, never a path elsewhere."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise Refused(f"{what} {name!r}: expected a plain directory name (letters, digits, '.', '_', '-'; "
                      "no '/' and not starting with '.'), e.g. engine_floor_2026-12-03f")
    return name


def _write_text(path: Path, text: str) -> Path:
    """`text` into a temporary beside `path` (renamed over it by _commit)."""
    tmp = path.with_name(f".{path.name}.adopt-tmp")
    tmp.write_text(text, encoding="utf-8")
    return tmp


def _commit(renames: list[tuple[Path, Path]], remove: Path) -> None:
    """The last step, after everything is computed and staged beside its place: renames (same file system) and the
    old campaign's removal."""
    for tmp, path in renames:
        tmp.replace(path)
    shutil.rmtree(remove)


def before_dir(repo: Path, before: str | None) -> Path:
    """The table's before: docs/bench_results/<before>, or the shipped campaign's committed copy."""
    name = plain_name(before, "--before") if before is not None else shipped(repo).name
    d = repo / "docs/bench_results" / name
    if not d.is_dir():
        raise Refused(f"docs/bench_results/{name}: " + ("--before: expected a committed campaign directory" if before
                                                       else "the shipped campaign's committed copy is missing"))
    return d


def adopt(src: Path, name: str, repo: Path = REPO, *, with_matrix: bool = True, before: str | None = None) -> list[Path]:
    """Check, copy and rewrite (module docstring); returns the paths written. Nothing is written when refused.
    `before`: the campaign (under docs/bench_results) the table compares with; default the one shipped so far."""
    plain_name(name, "NAME")
    old = shipped(repo)
    dest, pkg = repo / "docs/bench_results" / name, repo / "dwdp_trtllm/data/engine_calibration" / name
    if name == old.name or dest.exists():
        raise Refused(f"NAME {name}: already exists (docs/bench_results/{name} or the shipped campaign); choose a new one")
    before_p = before_dir(repo, before)
    with tempfile.TemporaryDirectory() as t:
        found, log = find_points(src, Path(t))
        held = check(found)
        stage = Path(t) / name
        stage.mkdir()
        for p in POINTS:
            shutil.copyfile(found[p], stage / f"{p}.json")
        md = (repo / "docs/PLANNER.md").read_text(encoding="utf-8")
        body = (f"Campaign {name} ({held}), adopted by `python3 scripts/dev/adopt_floor_campaign.py`"
                + (f" with `--before {before}`" if before else "") + f"; before: {before_p.name}"
                + ("" if before_p.name == old.name else f" (shipped until now: {old.name})") + ":\n\n"
                + table(before_p, stage, name))
        md = replace_between(md, "table", body, "docs/PLANNER.md")
        readme_p = repo / "dwdp_trtllm/data/engine_calibration/README.md"
        pin_p = repo / "tests/unit/test_perf_trtllm_target.py"
        readme, pin = readme_p.read_text(encoding="utf-8"), pin_p.read_text(encoding="utf-8")
        if old.name not in readme or f'SHIPPED_CAMPAIGN = "{old.name}"' not in pin:
            raise Refused(f"{readme_p.name} / {pin_p.name}: expected the shipped campaign's name {old.name}")
        if with_matrix:  # the staged campaign, as the shipped one will be: computed before anything is written
            md = replace_between(md, "matrix", matrix(stage), "docs/PLANNER.md")
        if log is not None:
            shutil.copyfile(log, stage / "bench.log")
        print(bench_table(found))  # for docs/BENCHMARKS.md: the measured points themselves
        # everything computed: write beside each place, then rename (a failure before the renames leaves the repo as
        # it was, but for temporaries that are removed)
        staged: list[tuple[Path, Path]] = []
        try:
            for tmp, path in ((dest.with_name(f".{name}.adopt-tmp"), dest), (pkg.with_name(f".{name}.adopt-tmp"), pkg)):
                shutil.copytree(stage, tmp, ignore=None if path == dest else shutil.ignore_patterns("bench.log"))
                staged.append((tmp, path))
            for path, text in ((readme_p, readme.replace(old.name, name)),
                               (pin_p, pin.replace(f'SHIPPED_CAMPAIGN = "{old.name}"', f'SHIPPED_CAMPAIGN = "{name}"')),
                               (repo / "docs/PLANNER.md", md)):
                staged.append((_write_text(path, text), path))
        except BaseException:
            for tmp, _ in staged:
                shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
            raise
        _commit(staged, old)
    return [dest, pkg, old, readme_p, pin_p, repo / "docs/PLANNER.md"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", nargs="?", help="gpu_check.sh calib's output: a directory or a .tar.gz")
    ap.add_argument("name", nargs="?", help="the campaign's name, e.g. engine_floor_2026-12-03d")
    ap.add_argument("--table", metavar="AFTER_DIR", help="only print the before/after table against AFTER_DIR")
    ap.add_argument("--no-matrix", action="store_true", help="leave docs/PLANNER.md section 4b's matrix as it is")
    ap.add_argument("--before", metavar="NAME", help="the table's before: docs/bench_results/NAME (default: the "
                                                     "campaign shipped so far)")
    a = ap.parse_args(argv)
    try:
        if a.table:
            print(table(before_dir(REPO, a.before), Path(a.table)))
            return 0
        if a.src is None or a.name is None:
            raise Refused("SRC NAME: both are needed (or --table AFTER_DIR)")
        for p in adopt(Path(a.src), a.name, with_matrix=not a.no_matrix, before=a.before):
            print(f"{'wrote' if p.exists() else 'removed'} {p.relative_to(REPO) if p.is_relative_to(REPO) else p}")
    except Refused as e:
        print(f"adopt_floor_campaign: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
