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
    return p


def run(args: argparse.Namespace) -> int:
    from ..ops import build

    cuda = build.default_cuda() if args.cuda is None else args.cuda
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
    return 0
