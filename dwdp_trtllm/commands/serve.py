"""`dwdp serve`: trtllm-serve with a DWDP config flag.

    dwdp serve --dwdp dwdp.yaml MODEL --extra_llm_api_options trtllm.yaml [any trtllm-serve arguments]
    dwdp serve --dwdp dwdp.yaml disaggregated_mpi_worker -c worker.yaml   (under mpirun -x DWDP_TRTLLM_CONFIG)
    dwdp serve --install-hook [--hook-site-dir DIR]                        (write the activation .pth only)

Validates the DWDP config, sets DWDP_TRTLLM_CONFIG (absolute path), makes sure the .pth hook is installed
(so MPI-spawned workers activate too) and replaces this process with trtllm-serve (os.execvp).
Exit 2 with a message when trtllm-serve is not on PATH or the config is invalid.
"""
from __future__ import annotations

from .terminal import paragraphs

import argparse
import importlib.util
import os
import shutil
import site
import sys
from pathlib import Path

from .. import env


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="exec trtllm-serve with DWDP activated (--dwdp CONFIG.yaml)", description=paragraphs(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dwdp", help="integration YAML (engine + dwdp_config) to activate")
    p.add_argument("--install-hook", action="store_true", help="only install the activation .pth and exit")
    p.add_argument("--hook-site-dir", type=Path, default=None,
                   help="site directory for the .pth (default: this interpreter's first site-packages)")
    p.add_argument("trtllm_args", nargs=argparse.REMAINDER, help="arguments passed to trtllm-serve unchanged")
    return p


def _extract_dwdp(rest: list[str]) -> tuple[str | None, list[str]]:
    """Pull `--dwdp X` / `--dwdp=X` out of the pass-through arguments (it may follow MODEL)."""
    out, path, i = [], None, 0
    while i < len(rest):
        a = rest[i]
        if a == "--dwdp":
            if i + 1 >= len(rest) or rest[i + 1].startswith("-"):
                from ..spec.schema import ConfigError
                raise ConfigError(None, "--dwdp", "needs a path: dwdp serve --dwdp CONFIG.yaml MODEL [trtllm-serve arguments]")
            path, i = rest[i + 1], i + 2
            continue
        if a.startswith("--dwdp="):
            path = a.split("=", 1)[1]
        else:
            out.append(a)
        i += 1
    return path, out


def ensure_hook(site_dir: Path | None) -> Path:
    from ..integration.hook import install_pth, pth_installed
    if site_dir is None:
        found = pth_installed()
        if found is not None:
            return found
        site_dir = Path(site.getsitepackages()[0])
    return install_pth(site_dir)


def run(args) -> int:
    rest = list(args.trtllm_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    path, rest = _extract_dwdp(rest)
    path = path or args.dwdp
    if args.install_hook:
        try:
            print(f"dwdp serve: activation hook at {ensure_hook(args.hook_site_dir)}")
        except OSError as e:
            print(f"dwdp serve: cannot write the .pth ({e}); pass --hook-site-dir to a writable site directory", file=sys.stderr)
            return 2
        return 0
    if not path:
        print("dwdp serve: --dwdp CONFIG.yaml is required (or use trtllm-serve directly)", file=sys.stderr)
        return 2
    from ..integration.settings import load_integration_config
    cfg = load_integration_config(path)  # ConfigError -> exit 2 via cli.main
    exe = shutil.which("trtllm-serve")
    if exe is None:
        from .check_trtllm import INSTALL_HINT
        print(f"dwdp serve: trtllm-serve not found on PATH: TensorRT-LLM is not installed in this environment "
              f"({INSTALL_HINT})", file=sys.stderr)
        return 2
    if importlib.util.find_spec("tensorrt_llm") is None:
        print(f"dwdp serve: warning: tensorrt_llm is not importable from {sys.executable}; the .pth hook must be "
              f"installed in the interpreter that runs {exe} (dwdp serve --install-hook --hook-site-dir ...)", file=sys.stderr)
    try:
        hook_path = ensure_hook(args.hook_site_dir)
    except OSError as e:
        print(f"dwdp serve: cannot install the activation .pth ({e}); pass --hook-site-dir", file=sys.stderr)
        return 2
    os.environ[env.DWDP_TRTLLM_CONFIG] = cfg.path
    print(f"dwdp serve: engine {cfg.engine}, {env.DWDP_TRTLLM_CONFIG}={cfg.path}, hook {hook_path}; exec {exe}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(exe, [exe, *rest])
    return 0  # not reached
