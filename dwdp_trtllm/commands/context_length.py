"""The model's context length and the one check every command applies to the lengths a user states against it.

`dwdp size` (--isl / --osl and its drawn requests), `dwdp plan` (--isl) and `dwdp gen-config` (--isl / --osl) refuse
a request longer than the model can hold through `check_context_length`, with the same line (exit 2):
    --isl: ISL + OSL within deepseek-r1's context length (163,840 tokens, max_position_embeddings), got ...
"""
from __future__ import annotations

from ..spec.schema import ConfigError


def context_length(source: str, model) -> int | None:
    """The model's context length: a config.json's max_position_embeddings (`source` a config.json path or checkpoint
    directory), else a preset's YaRN length (original_max_position_embeddings x factor: 163,840 for DeepSeek-V3 / R1,
    their config.json's value); None when unknown."""
    from ..spec.model_dims import is_config_path
    if is_config_path(source):
        from ..spec.hf_config import read_config_json
        v = read_config_json(source)[0].get("max_position_embeddings")
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
    y = model.rope_scaling
    return int(y.original_max_position_embeddings * y.factor) if y is not None else None


def check_context_length(source: str, model, isl: int, total: int | None = None) -> None:
    """The longest prompt `isl` and the longest request `total` (ISL + OSL; None: a prompt alone, as `dwdp plan`
    prices) within the model's context length (context_length); ConfigError naming --isl when the prompt alone
    reaches it, else --osl. Nothing is checked when the length is unknown."""
    limit = context_length(source, model)
    longest = isl if total is None else total
    if limit is None or longest <= limit:
        return
    what = "ISL" if total is None else "ISL + OSL"
    flag = "--isl" if total is None or isl >= limit else "--osl"
    raise ConfigError(None, flag, f"{what} within {model.name}'s context length ({limit:,} tokens, "
                                  f"max_position_embeddings), got requests of up to {longest:,}")
