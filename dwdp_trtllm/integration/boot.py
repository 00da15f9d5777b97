"""Activation entry point, imported by the .pth line in every interpreter and by --custom_module_dirs.

Importing this module does nothing unless DWDP_TRTLLM_CONFIG (path of our integration YAML) or
DWDP_TRTLLM=1 is set; then it validates the config once and installs a lazy post-import hook on the
TensorRT-LLM modules named in trtllm/targets.py PATCH_TARGETS. tensorrt_llm is never imported here:
patches are applied when TensorRT-LLM imports those modules itself.
"""
from __future__ import annotations

import sys

from .. import env

_state: dict = {"finder": None, "config": None, "reason": None}


def requested() -> bool:
    """True when one of the activation variables is set (DWDP_TRTLLM_CONFIG non-empty or DWDP_TRTLLM=1)."""
    return bool(env.get(env.DWDP_TRTLLM_CONFIG)) or env.get(env.DWDP_TRTLLM) == "1"


def activate(*, explicit: bool = False):
    """Install the post-import hook; returns the finder, or None when not requested.

    explicit=True (the --custom_module_dirs package) installs even without the variables; the
    config must then still be found at setup time (DWDP_TRTLLM_CONFIG) or setup raises.
    """
    if _state["finder"] is not None:
        return _state["finder"]
    if not (explicit or requested()):
        return None
    from . import hook
    from .trtllm import patches, targets  # import no tensorrt_llm at module level

    path = env.get(env.DWDP_TRTLLM_CONFIG)
    if path:
        from .process_role import remember_config
        from .settings import load_integration_config
        _state["config"] = load_integration_config(path)  # fail in the launcher, not deep in a worker
        remember_config(_state["config"])
    _state["reason"] = "custom_module_dirs" if explicit and not requested() else "environment"
    _state["finder"] = hook.install(targets.target_modules(), patches.on_target_imported)
    return _state["finder"]


def state() -> dict:
    return dict(_state)


def _reset_for_tests() -> None:
    from . import hook
    if _state["finder"] is not None:
        hook.uninstall(_state["finder"])
    _state.update(finder=None, config=None, reason=None)


try:
    activate()
except Exception as e:  # a broken config must not kill every python process silently: say why, loudly
    print(f"dwdp_trtllm: activation failed: {e}", file=sys.stderr)
    raise
