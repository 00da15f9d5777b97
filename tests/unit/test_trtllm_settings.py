"""Integration config: file loading, translation to/from upstream dwdp_config, engine choice."""
import dataclasses

import pytest
import yaml

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.integration.settings import (UPSTREAM_FIELDS, choose_engine, extras_of, from_upstream,
                                               load_integration_config, to_upstream)
from dwdp_trtllm.spec.schema import ConfigError


def test_roundtrip_upstream_placement_keeps_fields_and_reports_extras():
    cfg = DwdpConfig(dwdp_size=4, num_experts_per_worker=24, num_prefetch_experts=16, contention_opt=True,
                     slice_bytes=4 << 20, transport="vmm_fd", weight_dtype="fp8")
    up, dropped = to_upstream(cfg)
    assert list(up) == list(UPSTREAM_FIELDS)
    assert up == {"dwdp_size": 4, "num_groups": 1, "num_experts_per_worker": 24, "num_prefetch_experts": 16, "contention_opt": True}
    assert dropped["slice_bytes"] == 4 << 20 and dropped["transport"] == "vmm_fd" and not set(dropped) & set(UPSTREAM_FIELDS)
    assert from_upstream(up, extras=dropped) == cfg  # both ways, nothing lost when extras are kept
    back = from_upstream(up)  # extras dropped explicitly -> our defaults
    assert back.slice_bytes == DwdpConfig().slice_bytes and back.num_experts_per_worker == 24


def test_derived_placement_translates_only_when_uniform():
    up, _ = to_upstream(DwdpConfig(dwdp_size=4), num_experts=256)
    assert (up["num_experts_per_worker"], up["num_prefetch_experts"]) == (64, 64)
    with pytest.raises(ConfigError, match="dwdp_size"):
        to_upstream(DwdpConfig(dwdp_size=3), num_experts=256)
    with pytest.raises(ConfigError, match="redundant_experts"):
        to_upstream(DwdpConfig(dwdp_size=4, redundant_experts=2), num_experts=256)
    with pytest.raises(ConfigError, match="expert count"):
        to_upstream(DwdpConfig(dwdp_size=4))


def test_from_upstream_uses_upstream_defaults_and_rejects_unknown_keys():
    cfg = from_upstream({"dwdp_size": 4, "num_experts_per_worker": 18, "num_prefetch_experts": 18})
    assert cfg.contention_opt is False  # upstream default, not ours (True)
    with pytest.raises(ConfigError, match=r"dwdp_config\.enabled"):
        from_upstream({"dwdp_size": 4, "enabled": True})  # pre-merge key upstream no longer has
    with pytest.raises(ConfigError, match=r"dwdp_config\.dwdp_size"):
        from_upstream({"num_groups": 1}, extras={"dwdp_size": 2})

    class Pyd:  # pydantic-like object (TorchLlmArgs.dwdp_config)
        def model_dump(self):
            return {"dwdp_size": 2, "num_groups": 2, "num_experts_per_worker": 8, "num_prefetch_experts": 8, "contention_opt": True}
    assert from_upstream(Pyd()).world_size == 4


def test_load_integration_config_variants(tmp_path):
    p = tmp_path / "d.yaml"
    p.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "dwdp_config": {"dwdp_size": 4, "slice_bytes": 1 << 20}}))
    c = load_integration_config(p)
    assert c.engine == "dwdp_trtllm" and c.dwdp.dwdp_size == 4 and c.dwdp.slice_bytes == 1 << 20 and c.path == str(p.resolve())
    p.write_text(yaml.safe_dump({"dwdp_size": 2, "contention_opt": False}))
    c = load_integration_config(p)
    assert c.engine == "auto" and c.dwdp.dwdp_size == 2 and not c.dwdp.contention_opt
    p.write_text(yaml.safe_dump({"engine": "fast", "dwdp_config": {}}))
    with pytest.raises(ConfigError, match="engine"):
        load_integration_config(p)
    p.write_text(yaml.safe_dump({"dwdp_config": {"dwdp_size": 4}, "extra": 1}))
    with pytest.raises(ConfigError, match="extra"):
        load_integration_config(p)
    p.write_text(yaml.safe_dump({"dwdp_config": {"dwdp_size": 0}}))
    with pytest.raises(ConfigError, match="dwdp_size"):
        load_integration_config(p)


def test_choose_engine():
    assert choose_engine("auto", upstream_available=True, sm=100, weight_dtype="nvfp4")[0] == "upstream"
    assert choose_engine("auto", upstream_available=True, sm=90, weight_dtype="nvfp4")[0] == "dwdp_trtllm"
    assert choose_engine("auto", upstream_available=False, sm=100, weight_dtype="nvfp4")[0] == "dwdp_trtllm"
    assert choose_engine("dwdp_trtllm", upstream_available=True, sm=100, weight_dtype="nvfp4")[0] == "dwdp_trtllm"
    with pytest.raises(ConfigError, match="no DwdpConfig"):
        choose_engine("upstream", upstream_available=False, sm=100, weight_dtype="nvfp4")


def test_extras_cover_every_non_upstream_field():
    names = {f.name for f in dataclasses.fields(DwdpConfig)}
    assert set(extras_of(DwdpConfig())) == names - set(UPSTREAM_FIELDS)


def test_shutdown_timeout_is_read_and_checked(tmp_path):
    """shutdown_timeout_s (top level, beside engine): how long executor shutdown waits at the DWDP group's barrier
    before releasing the transport (adapter.close); both file layouts; bad values name the file and key."""
    from dwdp_trtllm.integration.settings import DEFAULT_SHUTDOWN_TIMEOUT_S
    p = tmp_path / "d.yaml"
    p.write_text(yaml.safe_dump({"engine": "dwdp_trtllm", "shutdown_timeout_s": 5, "dwdp_config": {"dwdp_size": 2}}))
    assert load_integration_config(p).shutdown_timeout_s == 5.0
    p.write_text(yaml.safe_dump({"shutdown_timeout_s": 2.5, "dwdp_size": 2}))  # flat layout: not a DwdpConfig field
    c = load_integration_config(p)
    assert c.shutdown_timeout_s == 2.5 and c.dwdp.dwdp_size == 2
    p.write_text(yaml.safe_dump({"dwdp_config": {"dwdp_size": 2}}))
    assert load_integration_config(p).shutdown_timeout_s == DEFAULT_SHUTDOWN_TIMEOUT_S == 60.0
    for bad in (0, -1, 3601, "60", True, float("nan")):
        p.write_text(yaml.safe_dump({"shutdown_timeout_s": bad, "dwdp_config": {"dwdp_size": 2}}))
        with pytest.raises(ConfigError, match=r"d\.yaml: shutdown_timeout_s: expected seconds in \(0, 3600\]"):
            load_integration_config(p)
