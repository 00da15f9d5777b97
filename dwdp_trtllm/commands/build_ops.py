"""`dwdp build-ops`: prebuild the dwdp C++/CUDA ops into the cache and print where the library is."""
from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("build-ops", help="prebuild the dwdp C++/CUDA ops (JIT cache) and print the library path")
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


def run(args: argparse.Namespace) -> int:
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
        path = build.load(cuda=cuda, verbose=args.verbose)
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
