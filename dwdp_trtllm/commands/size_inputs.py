"""`dwdp size`'s input checks beyond argparse: comma lists, request rates, the model's context length, MTP.

Every refusal is a ConfigError naming the flag (or the trace file) and what was expected (exit 2).
"""
from __future__ import annotations

import math

from ..spec.schema import ConfigError


def _ints(text: str, arg: str, lo: int, hi: int) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ConfigError(None, arg, f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(not lo <= v <= hi for v in vals):
        raise ConfigError(None, arg, f"expected integers in [{lo}, {hi:,}], got {text!r}")
    return tuple(dict.fromkeys(vals))


def _rates(text: str) -> tuple[float, ...]:
    """--rate: comma-separated requests/s, no empty item ("1,,2" is refused, not read as 1,2)."""
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(None, "--rate", f"expected requests/s (comma-separated numbers), got {text!r}") from None
    return vals


def context_length(args, model) -> int | None:
    """The model's context length: a config.json's max_position_embeddings, else a preset's YaRN length
    (original_max_position_embeddings x factor: 163,840 for DeepSeek-V3 / R1, their config.json's value); None when
    unknown."""
    from ..spec.model_dims import is_config_path
    if is_config_path(args.model):
        from ..spec.hf_config import read_config_json
        v = read_config_json(args.model)[0].get("max_position_embeddings")
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
    y = model.rope_scaling
    return int(y.original_max_position_embeddings * y.factor) if y is not None else None


def check_lengths(args, model, arrivals) -> None:
    """Every request's ISL + OSL within the model's context length (context_length), naming the flag or file."""
    limit = context_length(args, model)
    if limit is None or not len(arrivals):
        return
    isl, total = int(arrivals.isl.max()), int((arrivals.isl + arrivals.osl).max())
    if args.trace is None:  # the stated lengths too, not only this seed's draws
        isl, total = max(isl, args.isl), max(total, args.isl + args.osl)
    if total <= limit:
        return
    if args.trace is not None:
        raise ConfigError(args.trace, "input_length", f"requests of at most {limit:,} tokens (ISL + OSL) for "
                                                      f"{model.name}'s context length, got {total:,}")
    flag = "--isl" if isl >= limit else "--osl"
    raise ConfigError(None, flag, f"ISL + OSL within {model.name}'s context length ({limit:,} tokens, "
                                  f"max_position_embeddings), got requests of up to {total:,}")


def mtp_setting(args, model) -> tuple[int, float]:
    """(draft tokens, acceptance): --mtp, else gen-config's default (gen_config_serving.resolve: 1 when the
    checkpoint has an MTP layer); --mtp-acceptance, else decode_cost.DEFAULT_MTP_ACCEPTANCE."""
    from ..sizing.decode_cost import DEFAULT_MTP_ACCEPTANCE
    from .gen_config_serving import SERVING_BOUNDS
    hi = SERVING_BOUNDS["--mtp"]
    if args.mtp is not None and not 0 <= args.mtp <= hi:
        raise ConfigError(None, "--mtp", f"expected an integer in [0, {hi}], got {args.mtp}")
    mtp = args.mtp if args.mtp is not None else (1 if model.mtp_layers else 0)
    if mtp > 0 and not model.mtp_layers:
        raise ConfigError(None, "--mtp", f"{mtp} draft tokens, but the checkpoint has no MTP layer "
                                         "(num_nextn_predict_layers 0): use --mtp 0")
    acc = DEFAULT_MTP_ACCEPTANCE if args.mtp_acceptance is None else args.mtp_acceptance
    if not (math.isfinite(acc) and 0 < acc <= 1):
        raise ConfigError(None, "--mtp-acceptance", f"expected a rate in (0, 1], got {acc}")
    return mtp, acc
