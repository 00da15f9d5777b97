"""Lazy post-import hook: run a callback right after a named module finishes importing.

`install(targets, on_import)` puts a `PostImportFinder` at the front of sys.meta_path. When one of
`targets` is imported, the finder delegates to the real finders, wraps the loader's exec_module and
calls `on_import(module)` once the module body has run. Nothing is imported eagerly; a target
already in sys.modules is handled at install time.

Also here: the one-line .pth that activates the integration in every interpreter (mpirun and
MPI-pool workers included), `install_pth(site_dir)` to write it, and the --custom_module_dirs path.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable

from .. import env

PTH_NAME = "dwdp_trtllm_boot.pth"
#: The .pth line. It checks the two activation variables itself (names from env.py) so that an
#: interpreter without them pays for `import os` only, then imports the boot module.
PTH_LINE = (f"import os, importlib; (os.environ.get({env.DWDP_TRTLLM_CONFIG!r}) or os.environ.get({env.DWDP_TRTLLM!r})) "
            "and importlib.import_module('dwdp_trtllm.integration.boot')\n")
#: Package directory for `trtllm-serve --custom_module_dirs DIR` (imported by name, parent on sys.path).
CUSTOM_MODULE_DIR = Path(__file__).resolve().parent / "custom_module" / "dwdp_trtllm_activate"


class _LoaderWrapper(importlib.abc.Loader):
    def __init__(self, loader, callback: Callable[[object], None]):
        self._loader, self._callback = loader, callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name):  # get_source, is_package, ... of the real loader
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls on_import(module) after each target module's body ran (each target once)."""

    def __init__(self, targets: Iterable[str], on_import: Callable[[object], None]):
        self.targets = frozenset(targets)
        self.on_import = on_import
        self.done: set[str] = set()
        self._busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.targets or fullname in self.done or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname  # the real finders run below; do not recurse into ourselves
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
            if spec is None:
                for finder in sys.meta_path:
                    if finder is self or not hasattr(finder, "find_spec"):
                        continue
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _LoaderWrapper(spec.loader, self._fire)
        return spec

    def _fire(self, module) -> None:
        name = module.__name__
        if name in self.done:
            return
        self.done.add(name)
        self.on_import(module)


def install(targets: Iterable[str], on_import: Callable[[object], None]) -> PostImportFinder:
    """Insert a PostImportFinder first in sys.meta_path (idempotent per callback) and fire for loaded targets."""
    for f in sys.meta_path:
        if isinstance(f, PostImportFinder) and f.on_import is on_import:
            return f
    finder = PostImportFinder(targets, on_import)
    sys.meta_path.insert(0, finder)
    for name in sorted(finder.targets):
        mod = sys.modules.get(name)
        if mod is not None:
            finder._fire(mod)
    return finder


def uninstall(finder: PostImportFinder) -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def installed_finders() -> list[PostImportFinder]:
    return [f for f in sys.meta_path if isinstance(f, PostImportFinder)]


def install_pth(site_dir: str | Path) -> Path:
    """Write the activation .pth into `site_dir` (e.g. site.getsitepackages()[0]); returns its path.

    Inert unless DWDP_TRTLLM_CONFIG or DWDP_TRTLLM is set in the process environment.
    """
    d = Path(site_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"site directory {d} does not exist (expected a site-packages directory)")
    path = d / PTH_NAME
    path.write_text(PTH_LINE)
    return path


def remove_pth(site_dir: str | Path) -> bool:
    path = Path(site_dir) / PTH_NAME
    if path.exists():
        path.unlink()
        return True
    return False


def pth_installed() -> Path | None:
    """The installed .pth in any site directory of this interpreter, or None."""
    import site
    dirs = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]
    for d in dirs:
        p = Path(d) / PTH_NAME
        if p.is_file() and p.read_text() == PTH_LINE:
            return p
    return None
