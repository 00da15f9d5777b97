"""`dwdp plan` without --mnt / --batch prices a context server's iterations: the max_num_tokens `dwdp gen-config`
writes for that model and GPU (memory.context_max_num_tokens, the one default both commands call)."""
import json

import pytest
import yaml

from dwdp_trtllm.cli import main


def _gen_config_mnt(tmp_path, preset: str, gpu: str, extra=()) -> int:
    """The context servers' max_num_tokens gen-config writes (read back from its YAML, not from the function)."""
    out = tmp_path / f"gc-{preset}-{gpu}"
    assert main(["gen-config", "--model", "/ckpt/x", "--preset", preset, "--gpu", gpu, *extra, "--out", str(out)]) == 0
    return int(yaml.safe_load((out / "disagg_worker.yaml").read_text())["context_servers"]["max_num_tokens"])


def _plan(capsys, argv) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("preset,gpu,extra", [("deepseek-r1", "h200", ()),
                                              ("qwen3-235b-a22b", "h100", ("--dwdp-size", "4"))])
def test_plan_without_mnt_equals_plan_at_gen_configs_mnt(capsys, tmp_path, preset, gpu, extra):
    mnt = _gen_config_mnt(tmp_path, preset, gpu, extra)
    capsys.readouterr()
    base = ["--model", preset, "--gpu", gpu, "--isl", "4096,16384", "--dep", "trtllm"]
    default, given = _plan(capsys, base), _plan(capsys, base + ["--mnt", str(mnt)])
    assert default["rows"] == given["rows"] and default["recommendation"] == given["recommendation"]
    assert default["mnt"] == mnt and default["batch"] is None and default["mnt_is_default"] is True
    assert given["mnt_is_default"] is False
    # a context server packs requests up to the MNT: ISL 4096 puts 4 requests (16K tokens) on a rank, not one
    assert [r["tokens_per_rank"] for r in default["rows"]] == [mnt, mnt]


def test_plan_header_says_the_mnt_is_gen_configs_default(capsys):
    assert main(["plan", "--isl", "8192", "--dep", "trtllm"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "MNT 16384 (gen-config's default" in head and "batch" not in head
    assert main(["plan", "--isl", "8192", "--dep", "trtllm", "--batch", "1"]) == 0
    assert "batch 1" in capsys.readouterr().out.splitlines()[0]
