"""The installed TensorRT-LLM's MTPDecodingConfig, for gen-config's choice of the draft-count key
(integration/gen_config_mtp.py `installed_mtp_key` / `mtp_key_of`). Importing tensorrt_llm lives in this folder only."""
from __future__ import annotations

import contextlib
import sys


def mtp_decoding_config() -> type:
    """tensorrt_llm.llmapi.llm_args.MTPDecodingConfig of the TensorRT-LLM importable here (ImportError and whatever a
    broken install raises propagate to the caller, which reports them). What the import prints (TensorRT-LLM announces
    its version on stdout) goes to stderr: gen-config's stdout is its report (and JSON under --json)."""
    with contextlib.redirect_stdout(sys.stderr):
        from tensorrt_llm.llmapi.llm_args import MTPDecodingConfig
    return MTPDecodingConfig
