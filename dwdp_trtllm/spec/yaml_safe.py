"""YAML for user configs: PyYAML's safe loader (the C one when present: a 50 MB file parses in seconds, not
tens), checked on the node graph before any Python object is built:

- a mapping with a key given twice is refused (the last one would silently replace the first);
- aliases are refused when they make a cycle (recursive), or when the document they expand to would hold more
  than MAX_NODES nodes (a "billion laughs" file is a few lines that expand to billions of values);
- nesting deeper than MAX_DEPTH is refused, whichever loader parsed it (libyaml 0.2.5 stops at 1000 levels,
  the libyaml in PyYAML 6.0.3's wheels has no limit, and the pure-Python loader recurses until Python's limit);
Errors are ConfigError naming the file, the line and what was expected.
"""
from __future__ import annotations

from typing import Any

import yaml

from ..errors import ConfigError

#: the most nodes a config may expand to through its aliases (a real config has hundreds)
MAX_NODES = 1_000_000
#: the deepest nesting a config may have (a real config nests four or five levels)
MAX_DEPTH = 200
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _where(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}" if node.start_mark is not None else "somewhere"


def _check(root: yaml.Node, file: str | None) -> None:
    expanded: dict[int, int] = {}  # id(node) -> nodes it expands to
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool, int]] = [(root, False, 1)]
    while stack:  # iterative post-order walk (a deep document must not hit Python's recursion limit)
        node, done, depth = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = node.value if isinstance(node, yaml.SequenceNode) else (
                [n for kv in node.value for n in kv] if isinstance(node, yaml.MappingNode) else [])
            total = 1 + sum(expanded[id(k)] for k in kids)
            if total > MAX_NODES:
                raise ConfigError(file, "", f"its aliases expand to more than {MAX_NODES:,} values (at {_where(node)}); "
                                            "a config needs no alias bombs")
            expanded[nid] = total
            continue
        if nid in expanded:
            continue
        if nid in on_path:
            raise ConfigError(file, "", f"recursive alias at {_where(node)}: a node that contains itself")
        if depth > MAX_DEPTH:
            raise ConfigError(file, "", f"nested deeper than {MAX_DEPTH} levels (at {_where(node)}); "
                                        "a config nests a few")
        on_path.add(nid)
        stack.append((node, True, depth))
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if k.value in seen:
                        raise ConfigError(file, str(k.value), f"given twice ({_where(seen[k.value])} and {_where(k)}); "
                                                              "each key may appear once per mapping")
                    seen[k.value] = k
            stack.extend((n, False, depth + 1) for kv in node.value for n in kv)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((n, False, depth + 1) for n in node.value)


def safe_load(text: str, *, file: str | None = None) -> Any:
    """yaml.safe_load with the checks of the module doc; yaml.YAMLError for malformed YAML."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # the pure-Python composer recurses per level
            raise ConfigError(file, "", f"nested deeper than Python's recursion limit; a config nests a few") from None
        if node is None:
            return None
        _check(node, file)
        return loader.construct_document(node)
    finally:
        loader.dispose()
