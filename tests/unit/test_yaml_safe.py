"""spec/yaml_safe: deep nesting is refused the same way whichever YAML loader parses it (PyYAML's C loader
with libyaml 0.2.5 stops at 1000 levels, the one in PyYAML 6.0.3's wheels parses any depth, the pure-Python
loader recurses until Python's limit), and a config at the limit still loads."""
from __future__ import annotations

import pytest
import yaml

from dwdp_trtllm.errors import ConfigError
from dwdp_trtllm.spec import yaml_safe

LOADERS = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])


def _nested(levels: int) -> str:
    return "a: " + "[" * (levels - 1) + "]" * (levels - 1) + "\n"  # the mapping is level 1


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("levels", [yaml_safe.MAX_DEPTH + 1, 500, 3000])
def test_deeper_than_the_limit_is_one_config_error(monkeypatch, loader, levels):
    monkeypatch.setattr(yaml_safe, "_Loader", loader)
    try:
        yaml_safe.safe_load(_nested(levels), file="x.yaml")
    except ConfigError as e:
        assert "x.yaml" in str(e) and "nested deeper than" in str(e), e
    except yaml.YAMLError as e:  # libyaml 0.2.5's own limit (1000 levels) comes first in its scanner
        assert levels > 1000 and "nesting depth" in str(e), e
    else:
        pytest.fail(f"{levels} levels loaded with {loader.__name__}")


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_a_deep_config_within_the_limit_loads(monkeypatch, loader):
    monkeypatch.setattr(yaml_safe, "_Loader", loader)
    levels = min(yaml_safe.MAX_DEPTH, 60)  # the pure-Python composer needs a few frames per level
    data = yaml_safe.safe_load(_nested(levels), file="x.yaml")
    depth, v = 2, data["a"]
    while v:
        v, depth = v[0], depth + 1
    assert depth == levels
