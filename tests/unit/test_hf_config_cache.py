"""A checkpoint's config.json is read once while it is unchanged (hf_config.spec_from_hf_config's cache):
ModelConfig checks it when built and every spec() call asks again. An edited or replaced file is read again."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dwdp_trtllm.spec.config import ModelConfig
from dwdp_trtllm.spec.hf_config import spec_from_hf_config
from dwdp_trtllm.spec.schema import ConfigError

from test_checkpoint_config import DEEPSEEK_V3_RELEASE as RELEASE  # noqa: E402  (tests/unit is on sys.path)


@pytest.fixture
def reads(monkeypatch):
    """Paths whose text was read (every config.json read goes through Path.read_text)."""
    seen: list[Path] = []
    real = Path.read_text

    def counting(self, *a, **kw):
        seen.append(Path(self).absolute())
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", counting)
    return seen


def _write(d: Path, **changes) -> Path:
    f = d / "config.json"
    f.write_text(json.dumps({**RELEASE, **changes}))
    return f


def _later_mtime(f: Path, seconds: int = 2) -> None:
    """An edit saved later: a timestamp past the filesystem's tick (two writes in one tick share an mtime)."""
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 10 ** 9))


def test_model_config_reads_config_json_once(tmp_path, reads):
    f = _write(tmp_path)
    cfg = ModelConfig(checkpoint=str(tmp_path), num_layers=4)  # checked when built
    specs = [cfg.spec() for _ in range(5)]
    assert reads.count(f.absolute()) == 1  # was 6: once when built + once per spec()
    assert {s.num_layers for s in specs} == {4}
    assert spec_from_hf_config(tmp_path) is spec_from_hf_config(f)  # the directory or the file: one entry


def test_an_edited_config_json_is_read_again(tmp_path, reads):
    f = _write(tmp_path)
    cfg = ModelConfig(checkpoint=str(tmp_path))
    assert cfg.spec().num_experts == 256
    _write(tmp_path, n_routed_experts=128)  # same size, edited in place
    _later_mtime(f)
    assert cfg.spec().num_experts == 128
    assert reads.count(f.absolute()) == 2


def test_a_config_json_renamed_over_is_read_again(tmp_path, reads):
    ckpt, staging = tmp_path / "ckpt", tmp_path / "staging"
    ckpt.mkdir(), staging.mkdir()
    f = _write(ckpt)
    assert spec_from_hf_config(ckpt).top_k == 8
    st = f.stat()
    new = _write(staging, num_experts_per_tok=6)  # same size, another inode
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old file's mtime
    os.replace(new, f)
    assert spec_from_hf_config(ckpt).top_k == 6
    assert reads.count(f.absolute()) == 2


def test_a_bad_config_json_is_not_cached(tmp_path, reads):
    f = _write(tmp_path, topk_method="group_limited_greedy")
    for _ in range(2):
        with pytest.raises(ConfigError, match="topk_method"):
            spec_from_hf_config(tmp_path)
    assert reads.count(f.absolute()) == 2
