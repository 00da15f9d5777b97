"""A script under scripts/ loaded as a module for tests (scripts/ is not a package): a fresh module object under
`alias` in sys.modules (so a test's monkeypatching stays with the test file that loaded it)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str, alias: str):
    """scripts/<name>.py as a module registered as `alias`."""
    spec = importlib.util.spec_from_file_location(alias, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod
    spec.loader.exec_module(mod)
    return mod
