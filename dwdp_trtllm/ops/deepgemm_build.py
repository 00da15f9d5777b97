"""DeepGEMM as a pinned, built dependency: `dwdp build-ops --deepgemm` builds it from a source tree at the pinned
commits into the ops cache, and ops/deepgemm.module() finds it there (no environment variable, no manual step).

The pin (what the routed-expert op was measured with, docs/BENCHMARKS.md):
  DeepGEMM   deepseek-ai/DeepGEMM @ PIN_DEEPGEMM (csrc/, deep_gemm/, setup.py)
  fmt        fmtlib/fmt @ PIN_FMT (DeepGEMM's third-party/fmt submodule pin; headers only)
  CUTLASS    the nvidia-cutlass wheel's headers (the [cutlass] extra), or CUTLASS_DIR: ops/build.cutlass_include_dirs
Where the source comes from: `--deepgemm-src DIR` (a DeepGEMM checkout or archive at the pin, with
third-party/fmt/include; a git checkout is checked against the pin), else a `git clone` of the public repositories
at the pinned commits when the machine can reach GitHub (the clone is kept in the cache). The build is DeepGEMM's own
setup.py (`build_ext --inplace`, torch's extension toolchain) in cache_dir()/deepgemm/<PIN_DEEPGEMM>/; its kernels are
JIT-compiled by DeepGEMM at first use into DG_JIT_CACHE_DIR (DeepGEMM's own variable; default ~/.deep_gemm).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .. import env

PIN_DEEPGEMM = "54e2261"
PIN_FMT = "553ec11"
REPO_DEEPGEMM = "https://github.com/deepseek-ai/DeepGEMM.git"
REPO_FMT = "https://github.com/fmtlib/fmt.git"
#: what a source tree must hold to be built
NEEDED = ("csrc/python_api.cpp", "deep_gemm/__init__.py", "setup.py", "third-party/fmt/include/fmt/format.h")


class DeepGEMMBuildError(RuntimeError):
    """The pinned DeepGEMM cannot be built here; the message names what is missing and what to do."""


def build_dir() -> Path:
    """Where the built tree lives (ops/deepgemm.module() looks here when DWDP_DEEPGEMM_DIR is unset)."""
    return env.cache_dir() / "deepgemm" / PIN_DEEPGEMM


def built() -> bool:
    return any((build_dir() / "deep_gemm").glob("_C*.so"))


def check_source(src: Path) -> None:
    """DeepGEMMBuildError naming the first missing file, or a git checkout at another commit than the pin."""
    missing = [n for n in NEEDED if not (src / n).is_file()]
    if missing:
        raise DeepGEMMBuildError(f"--deepgemm-src {src}: {missing[0]} missing (expected DeepGEMM {PIN_DEEPGEMM} with "
                                 "third-party/fmt checked out: git clone --recursive "
                                 f"{REPO_DEEPGEMM} && git -C DeepGEMM checkout {PIN_DEEPGEMM})")
    if (src / ".git").exists():
        head = _git(["-C", str(src), "rev-parse", "HEAD"])
        if head is not None and not head.startswith(PIN_DEEPGEMM):
            raise DeepGEMMBuildError(f"--deepgemm-src {src}: checked out at {head[:12]}, not the pinned "
                                     f"{PIN_DEEPGEMM} (git -C {src} checkout {PIN_DEEPGEMM})")


def _git(args: list[str], timeout: float = 600) -> str | None:
    try:
        r = subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def clone(dest: Path, log=print) -> Path:
    """The pinned sources cloned from GitHub into dest (kept; reused when already there). DeepGEMMBuildError when git
    or the network is not there, naming --deepgemm-src as the way out."""
    if (dest / NEEDED[0]).is_file():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    fmt = dest / "third-party" / "fmt"
    for repo, pin, where in ((REPO_DEEPGEMM, PIN_DEEPGEMM, dest), (REPO_FMT, PIN_FMT, fmt)):
        log(f"cloning {repo} @ {pin}")
        if where == fmt:
            shutil.rmtree(fmt, ignore_errors=True)
        if _git(["clone", "--quiet", "--no-checkout", repo, str(where)]) is None or \
                _git(["-C", str(where), "checkout", "--quiet", pin]) is None:
            raise DeepGEMMBuildError(f"cannot clone {repo} @ {pin} (no git or no network here): pass a source tree "
                                     "at the pin with --deepgemm-src DIR")
    return dest


def build(src: Path | None, cutlass_include: Path, log=print, jobs: int = 8) -> Path:
    """Build the pinned DeepGEMM into build_dir() (an existing build is reused) and return it. src None: clone."""
    out = build_dir()
    if built():
        log(f"DeepGEMM {PIN_DEEPGEMM}: already built in {out}")
        return out
    src = clone(env.cache_dir() / "deepgemm" / f"src-{PIN_DEEPGEMM}", log) if src is None else src
    check_source(src)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out, ignore=shutil.ignore_patterns(".git", "build", "*.so"))
    (out / "third-party" / "cutlass").mkdir(parents=True, exist_ok=True)
    for link, target in ((out / "third-party" / "cutlass" / "include", cutlass_include),
                         (out / "deep_gemm" / "include" / "cute", cutlass_include / "cute"),
                         (out / "deep_gemm" / "include" / "cutlass", cutlass_include / "cutlass")):
        if link.is_symlink() or link.exists():
            link.unlink() if link.is_symlink() or link.is_file() else shutil.rmtree(link)
        link.symlink_to(target, target_is_directory=True)
    log(f"building DeepGEMM {PIN_DEEPGEMM} in {out} (setup.py build_ext, a few minutes)")
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=out,
                       env={**__import__("os").environ, "DG_USE_LOCAL_VERSION": "0", "MAX_JOBS": str(jobs)},
                       capture_output=True, text=True)
    if r.returncode != 0 or not built():
        tail = "\n".join((r.stdout + r.stderr).splitlines()[-15:])
        raise DeepGEMMBuildError(f"DeepGEMM's setup.py build_ext failed in {out} (exit {r.returncode}):\n{tail}")
    (out / "deep_gemm" / "BUILT_WITH").write_text("setup\n")
    return out
