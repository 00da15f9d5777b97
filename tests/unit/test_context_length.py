"""Every command that takes --isl / --osl refuses a request longer than the model's context length the same way:
exit 2, one line naming the flag and the length (commands/context_length.check_context_length, one function).

DeepSeek-R1's context length is 163,840 tokens: its config.json's max_position_embeddings, which is its YaRN
original_max_position_embeddings 4,096 x factor 40 (huggingface.co/deepseek-ai/DeepSeek-R1 config.json)."""
import json
from pathlib import Path

import pytest

from dwdp_trtllm.cli import main
from dwdp_trtllm.commands import context_length as cl

DIMS = Path(__file__).resolve().parents[2] / "dwdp_trtllm" / "data" / "models"


def _argv(cmd: str, tmp_path) -> list[str]:
    """The command with everything but the lengths; nothing it refuses for another reason."""
    return {"plan": ["plan", "--model", "deepseek-r1", "--no-bench-results", "--dwdp-size", "8"],
            "size": ["size", "--model", "deepseek-r1", "--rate", "1", "--duration", "10", "--isl-dist", "fixed"],
            "gen-config": ["gen-config", "--model", "m", "--preset", "deepseek-r1",
                           "--out", str(tmp_path / "out")]}[cmd]


def _refused(capsys, argv) -> str:
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 2 and not cap.out, (rc, cap.out[-400:])
    assert len(cap.err.strip().splitlines()) == 1 and "Traceback" not in cap.err, cap.err
    return cap.err


@pytest.mark.parametrize("cmd, lengths, flag", [
    ("plan", ["--isl", "200000"], "--isl"),
    ("plan", ["--isl", "1024,163841"], "--isl"),  # any ISL of the list
    ("size", ["--isl", "200000"], "--isl"),
    ("gen-config", ["--isl", "200000"], "--isl"),
    ("gen-config", ["--isl", "160000", "--osl", "4000"], "--osl"),
    ("gen-config", ["--osl", "170000"], "--osl"),
])
def test_a_length_past_the_context_length_is_refused_naming_the_flag(tmp_path, capsys, cmd, lengths, flag):
    err = _refused(capsys, _argv(cmd, tmp_path) + lengths)
    assert f"config error: {flag}: " in err and "163,840" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cmd, lengths", [("plan", ["--isl", "163840"]),
                                          ("gen-config", ["--isl", "160000", "--osl", "3840"])])
def test_a_length_at_the_context_length_is_accepted(tmp_path, capsys, cmd, lengths):
    assert main(_argv(cmd, tmp_path) + lengths + (["--json"] if cmd == "plan" else [])) == 0
    capsys.readouterr()


@pytest.mark.parametrize("cmd", ["plan", "size", "gen-config"])
def test_every_command_asks_the_one_function(tmp_path, capsys, monkeypatch, cmd):
    """A context length of 2,048 from context_length.context_length reaches each command's refusal: one fact, one
    function (the lengths 4,096 + 1,024 are within DeepSeek-R1's own)."""
    monkeypatch.setattr(cl, "context_length", lambda source, model: 2048)
    err = _refused(capsys, _argv(cmd, tmp_path) + ["--isl", "4096"])
    assert "config error: --isl: " in err and "(2,048 tokens" in err, err


def test_plan_leaves_out_default_isls_the_model_cannot_hold(tmp_path, capsys):
    """A config.json of 8,192 positions: plan's default ISLs up to 8,192 only (a stated longer one is refused)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**json.loads((DIMS / "glm-4.5.json").read_text()), "max_position_embeddings": 8192}))
    base = ["plan", "--model", str(cfg), "--gpu", "h200", "--weight-dtype", "nvfp4", "--dwdp-size", "8",
            "--no-bench-results", "--dep", "trtllm"]
    assert main(base + ["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert sorted({r["isl"] for r in rows}) == [1024, 4096, 8192]
    err = _refused(capsys, base + ["--isl", "16384"])
    assert "config error: --isl: " in err and "(8,192 tokens" in err, err
