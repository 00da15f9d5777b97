"""`dwdp build-ops`: prebuild the dwdp C++/CUDA ops into the cache and print where the library is.

The CUDA build compiles one object per source (the CUTLASS kernels take about 2 minutes on a fresh machine): while
it runs, stderr shows what is compiling and how far it is (rich; a line per step when piped), stdout gets only the
library's path. A library already in the cache is loaded without compiling.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

#: how often the progress counts the object files the compiler has written (s)
POLL_S = 0.5


def add_parser(subparsers) -> argparse.ArgumentParser:
    from .terminal import paragraphs

    p = subparsers.add_parser("build-ops", help="prebuild the dwdp C++/CUDA ops (JIT cache) and print the library path",
                              description=paragraphs(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cuda", dest="cuda", action="store_true", default=None, help="build the CUDA (sm90a) library")
    g.add_argument("--cpu", dest="cuda", action="store_false", help="build the CPU-only library")
    p.add_argument("--verbose", action="store_true", help="show the compiler commands")
    p.add_argument("--deepgemm", action="store_true",
                   help="also build the pinned DeepGEMM (the FP8 routed experts' mainloop on sm_90; "
                        "ops/deepgemm_build.py names the pin) into the ops cache")
    p.add_argument("--deepgemm-src", metavar="DIR", default=None,
                   help="DeepGEMM source tree at the pin (with third-party/fmt); default: git clone")
    return p


def compiled(build_dir: Path, since: float) -> int:
    """Object files (`*.o`: one per source, ninja's outputs) written in `build_dir` at or after `since` (time.time)."""
    n = 0
    for f in build_dir.glob("*.o"):
        try:
            n += f.stat().st_mtime >= since
        except OSError:  # removed while counted (ninja replaces outputs)
            pass
    return n


def build_with_progress(build, cuda: bool, verbose: bool, console) -> Path:
    """build.load(cuda) with a progress bar on `console` (stderr): sources compiled of all, then the link, elapsed
    time; a line before and after, so a log shows the build too. A cached library: one line, no bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    name, build_dir, sources = build.build_plan(cuda)
    flavour = f"cuda {build.CUDA_ARCH}" if cuda else "cpu"
    if build.is_built(cuda):
        console.print(f"dwdp build-ops: {name} ({flavour}) is already built in {build_dir}")
        return build.load(cuda=cuda, verbose=verbose)
    console.print(f"dwdp build-ops: compiling {len(sources)} source(s) of {name} ({flavour}) in {build_dir}"
                  + (" (the CUDA kernels take about 2 minutes)" if cuda else ""))
    t0, start = time.monotonic(), time.time() - 1.0  # a coarse file clock: count objects from a second before
    total = len(sources) + 1  # every object, then the link
    done = threading.Event()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("compiling, then linking", total=total)

        def watch() -> None:
            while not done.wait(POLL_S):
                progress.update(task, completed=min(compiled(build_dir, start), total - 1))

        watcher = threading.Thread(target=watch, name="build-ops-progress", daemon=True)
        watcher.start()
        try:
            path = build.load(cuda=cuda, verbose=verbose)
        finally:
            done.set()
            watcher.join()
        progress.update(task, completed=total)
    console.print(f"dwdp build-ops: built {name} in {time.monotonic() - t0:.0f} s")
    return path


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..ops import build

    cuda = build.default_cuda() if args.cuda is None else args.cuda
    want_dg = args.deepgemm or args.deepgemm_src is not None
    if want_dg and not cuda:
        print("dwdp build-ops: --deepgemm: DeepGEMM is CUDA-only (sm_90); drop --cpu", file=sys.stderr)
        return 2
    if args.deepgemm_src is not None:  # a bad source tree is bad input: said before any build
        from pathlib import Path

        from ..ops import deepgemm_build as dgb
        try:
            dgb.check_source(Path(args.deepgemm_src))
        except dgb.DeepGEMMBuildError as e:
            print(f"dwdp build-ops: {e}", file=sys.stderr)
            return 2
    try:  # a toolchain this machine lacks (CPU torch, no nvcc, no compiler) is bad input: exit 2 before any build
        build._check_toolchain(cuda)
    except build.OpsBuildError as e:
        print(f"dwdp build-ops: {'--cuda' if cuda else '--cpu'}: {e}", file=sys.stderr)
        return 2
    try:
        path = build_with_progress(build, cuda, args.verbose, Console(stderr=True, highlight=False))
    except build.OpsBuildError as e:
        print(f"dwdp build-ops: {e}", file=sys.stderr)
        return 1
    print(f"dwdp ops ({'cuda ' + build.CUDA_ARCH if cuda else 'cpu'}): {path}")
    return _deepgemm(args) if want_dg else 0


def _deepgemm(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..ops import build, deepgemm_build as dgb
    try:
        out = dgb.build(Path(args.deepgemm_src) if args.deepgemm_src else None, build.cutlass_include_dirs()[0],
                        log=lambda m: print(m, file=sys.stderr))
    except build.OpsBuildError as e:
        print(f"dwdp build-ops: --deepgemm: {e}", file=sys.stderr)
        return 2
    except dgb.DeepGEMMBuildError as e:
        print(f"dwdp build-ops: {e}", file=sys.stderr)
        return 1
    print(f"DeepGEMM {dgb.PIN_DEEPGEMM}: {out}")
    return 0
