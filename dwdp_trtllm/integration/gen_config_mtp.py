"""The key TensorRT-LLM takes the MTP draft count under (pure but for one probe of the installed version).

`llm_args.py` @ 0004396720054fd8 moved it: `MTPDecodingConfig._remap_deprecated_num_nextn_predict_layers` turns
`num_nextn_predict_layers` into `max_draft_len` with a deprecation warning, the field itself `init=False` ("Do not set
manually"). Older versions (llm_args.py @ fcd3f31682808ae5: `MTPDecodingConfig.num_nextn_predict_layers:
Optional[int] = 1`, `max_draft_len` a separate DecodingBaseConfig field) take the count under `num_nextn_predict_layers`
only, and a lone `max_draft_len` leaves them at one draft step. gen-config
writes what the TensorRT-LLM importable where it runs takes (`installed_mtp_key`), `max_draft_len` without one.
"""
from __future__ import annotations

from typing import Any

#: where MTPDecodingConfig moved the draft count to max_draft_len (num_nextn_predict_layers: "Do not set manually")
MTP_KEY_AT = "llm_args.py @ 0004396720054fd8 (MTPDecodingConfig._remap_deprecated_num_nextn_predict_layers)"
MTP_KEYS = ("max_draft_len", "num_nextn_predict_layers")


def speculative_config(mtp: int, key: str = "max_draft_len") -> dict[str, Any]:
    """One-model MTP with `mtp` draft tokens on context and generation servers, as upstream's DWDP recipe
    (examples/dwdp/reproduce.py build_worker_config); the count under `key` (MTP_KEYS): max_draft_len where
    MTPDecodingConfig remaps the old key (MTP_KEY_AT), num_nextn_predict_layers before (mtp_key_of)."""
    if key not in MTP_KEYS:
        raise ValueError(f"MTP key {key!r}: expected one of {MTP_KEYS}")
    return {"decoding_type": "MTP", key: mtp}


def mtp_key_of(config_cls: Any) -> str:
    """The key an MTPDecodingConfig class takes the draft count under. max_draft_len where num_nextn_predict_layers is
    gone, remapped (`_remap_deprecated_num_nextn_predict_layers`, MTP_KEY_AT) or an init=False field; else
    num_nextn_predict_layers (llm_args.py @ fcd3f31682808ae5: `num_nextn_predict_layers: Optional[int] = 1`, which a
    lone max_draft_len leaves at one draft step)."""
    fields = getattr(config_cls, "model_fields", None) or {}
    notes: dict = {}
    for k in reversed(getattr(config_cls, "__mro__", ())):
        notes.update(getattr(k, "__annotations__", {}) or {})
    f = fields.get("num_nextn_predict_layers")
    if f is None and "num_nextn_predict_layers" not in notes:
        return "max_draft_len"
    if hasattr(config_cls, "_remap_deprecated_num_nextn_predict_layers") or getattr(f, "init", None) is False:
        return "max_draft_len"
    return "num_nextn_predict_layers"


def installed_mtp_key() -> tuple[str, str]:
    """(key, how it was chosen) for the TensorRT-LLM importable here; without one, max_draft_len (MTP_KEY_AT) and a
    reason saying so (gen-config --mtp-key picks either explicitly)."""
    import importlib.util
    try:
        found = importlib.util.find_spec("tensorrt_llm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "max_draft_len", "no TensorRT-LLM importable here: the current key (--mtp-key for older versions)"
    from .trtllm.mtp_config import mtp_decoding_config
    try:
        cls = mtp_decoding_config()
    except Exception as e:  # noqa: BLE001 - a broken install is reported, not raised
        return "max_draft_len", (f"TensorRT-LLM here could not be read ({type(e).__name__}): the current key "
                                 "(--mtp-key for older versions)")
    return mtp_key_of(cls), "read from the TensorRT-LLM importable here"
