"""Typed loading of frozen config dataclasses from YAML/dicts, with errors that name file, key and expectation.

Every config dataclass in this package declares its fields with `doc(...)`; `from_dict` checks
unknown keys, types and Literal choices, and `expand_sweep` turns list-valued scalar keys into the
cross product of points (a `dwdp bench` sweep). Nothing here knows about DWDP.
"""
from __future__ import annotations

import dataclasses
import itertools
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from ..errors import ConfigError  # noqa: F401 - re-exported: every caller imports it from here
from .yaml_safe import safe_load


def doc(text: str, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its user-facing docstring (rendered into docs/CONFIG.md)."""
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"doc": text})
    return dataclasses.field(default=default, metadata={"doc": text})


def field_docs(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, type string, default, doc) for each field of a config dataclass."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = "(required)"
        rows.append((f.name, type_name(hints[f.name]), default, f.metadata.get("doc", "")))
    return rows


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"list of {type_name(args[0])}" if args else "list"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _is_seq(tp: Any) -> bool:
    if get_origin(tp) in (Union, types.UnionType):
        return any(_is_seq(a) for a in get_args(tp) if a is not type(None))
    return get_origin(tp) in (list, tuple)


def _convert(tp: Any, value: Any, key: str, file: str | None) -> Any:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, file=file, prefix=key)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, key, file)
            except ConfigError as e:
                errors.append(e.expected)
        raise ConfigError(file, key, f"expected {type_name(tp)}, got {value!r}")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(file, key, f"expected one of {', '.join(map(repr, choices))}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(file, key, f"expected a list, got {value!r}")
        (item_tp,) = [a for a in get_args(tp) if a is not Ellipsis][:1] or [Any]
        return tuple(_convert(item_tp, v, f"{key}[{i}]", file) for i, v in enumerate(value))
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(file, key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(file, key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(file, key, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(file, key, f"expected a string, got {value!r}")
        return value
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(file, key, f"expected a mapping, got {value!r}")
        return dict(value)
    raise TypeError(f"unsupported config type {tp!r} at {key}")


def from_dict(cls: type, data: Any, *, file: str | None = None, prefix: str = "") -> Any:
    """Build the frozen dataclass `cls` from a mapping; unknown keys and bad types raise ConfigError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(file, prefix, f"expected a mapping of keys to values, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        if k not in names:
            raise ConfigError(file, f"{prefix}.{k}" if prefix else str(k),
                              f"unknown key; expected one of {', '.join(sorted(names))}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], key, file)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            raise ConfigError(file, key, "required key is missing")
    try:
        return cls(**kwargs)
    except ConfigError as e:  # raised by __post_init__ with a key relative to `cls`
        k = f"{prefix}.{e.key}" if prefix and e.key else (e.key or prefix)
        raise ConfigError(file or e.file, k, e.expected) from None


#: the largest config file read (a config is a few KiB, a 10,000-value sweep list ~80 KiB): a bigger file is refused
#: before parsing, which costs seconds per MiB
MAX_CONFIG_BYTES = 256 << 10


def yaml_error_text(e: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (line, column)."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        what = " ".join(f"{e.context or ''} {e.problem or ''}".split())
        return f"{what} (line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1})"
    return " ".join(str(e).split())


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; a missing, oversized or unreadable file, bad YAML, an empty file or a non-mapping root
    raises ConfigError (one line)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), "", "file not found" if not p.exists() else "not a regular file")
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(str(p), "", f"{size:,} bytes, more than a config file may have ({MAX_CONFIG_BYTES:,}); "
                                          "is it a config?")
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read the file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(str(p), "", f"not UTF-8 text (byte {e.start}): a YAML config is expected") from None
    try:
        data = safe_load(text, file=str(p))  # duplicate keys, recursive aliases and alias bombs refused
    except yaml.YAMLError as e:
        raise ConfigError(str(p), "", f"not valid YAML: {yaml_error_text(e)}") from None
    except RecursionError:
        raise ConfigError(str(p), "", "nested too deeply to be a config") from None
    if data is None:
        raise ConfigError(str(p), "", "file is empty; expected a mapping of config sections")
    if not isinstance(data, dict):
        raise ConfigError(str(p), "", f"expected a mapping at the top level, got {type(data).__name__}")
    return data


#: the most points one sweep may have unless the caller raises it (`dwdp bench --max-points`)
MAX_SWEEP_POINTS = 10_000


def expand_sweep(cls: type, data: dict, *, file: str | None = None, prefix: str = "",
                 max_points: int = MAX_SWEEP_POINTS) -> tuple[list[str], list[dict]]:
    """Cross product of every list given for a scalar key of `cls` (a list of lists for a list-typed key).

    Returns (swept dotted keys, list of point dicts). Unknown keys are left for `from_dict` to report.
    """
    axes: list[tuple[tuple[str, ...], list]] = []

    def walk(c: type, d: Any, path: tuple[str, ...]) -> None:
        if not isinstance(d, dict):
            return
        hints = typing.get_type_hints(c)
        for f in dataclasses.fields(c):
            if f.name not in d:
                continue
            tp, v = hints[f.name], d[f.name]
            if dataclasses.is_dataclass(tp):
                walk(tp, v, path + (f.name,))
            elif _is_seq(tp):
                if isinstance(v, list) and v and all(isinstance(x, list) for x in v):
                    axes.append((path + (f.name,), v))
            elif isinstance(v, list):
                if not v:
                    raise ConfigError(file, ".".join(path + (f.name,)), "an empty list sweeps nothing; give a value or a non-empty list")
                axes.append((path + (f.name,), v))

    walk(cls, data, ())
    n_points = 1
    for _, vals in axes:
        n_points *= len(vals)
    if n_points > max_points:  # counted before expanding: a 10^8-point product must not be built
        raise ConfigError(file, ",".join(".".join(p) for p, _ in axes),
                          f"the sweep has {n_points:,} points, more than the bound of {max_points:,} "
                          "(raise it with `dwdp bench --max-points N`)")
    points = []
    for combo in itertools.product(*[vals for _, vals in axes]):
        point = _deepcopy(data)
        for (path, _), v in zip(axes, combo):
            node = point
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = v
        points.append(point)
    return [".".join(p) for p, _ in axes], points


def _deepcopy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy(v) for v in d]
    return d


def parse_override(text: str, *, arg: str = "--set") -> tuple[list[str], Any]:
    """`a.b.c=VALUE` -> (['a','b','c'], yaml-parsed VALUE)."""
    if "=" not in text:
        raise ConfigError(None, arg, f"expected KEY=VALUE (e.g. workload.isl=16384), got {text!r}")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(None, arg, f"bad key in {text!r}")
    try:
        value = safe_load(raw, file=arg)
    except yaml.YAMLError:
        value = raw
    except ConfigError as e:
        raise ConfigError(None, key, e.expected) from None
    return key.split("."), value


def apply_override(data: dict, path: list[str], value: Any) -> None:
    node = data
    for k in path[:-1]:
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(None, ".".join(path), f"{k} is not a section")
        node = nxt
    node[path[-1]] = value
