"""`dwdp size`'s input checks beyond argparse: comma lists, request rates, the model's context length, MTP.

Every refusal is a ConfigError naming the flag (or the trace file) and what was expected (exit 2).
"""
from __future__ import annotations

import math

from ..spec.schema import ConfigError
from .context_length import check_context_length, context_length


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


def check_lengths(args, model, arrivals) -> None:
    """Every request's ISL + OSL within the model's context length (context_length.check_context_length, the check
    `dwdp plan` and `dwdp gen-config` apply too), naming the flag, or the trace file."""
    if not len(arrivals):
        return
    isl, total = int(arrivals.isl.max()), int((arrivals.isl + arrivals.osl).max())
    if args.trace is None:  # the stated lengths too, not only this seed's draws
        check_context_length(args.model, model, max(isl, args.isl), max(total, args.isl + args.osl))
        return
    limit = context_length(args.model, model)
    if limit is not None and total > limit:
        raise ConfigError(args.trace, "input_length", f"requests of at most {limit:,} tokens (ISL + OSL) for "
                                                      f"{model.name}'s context length, got {total:,}")


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
