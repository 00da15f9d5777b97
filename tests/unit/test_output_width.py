"""What a terminal shows fits 80 columns: every line the commands print (COLUMNS pinned to 80 by tests/conftest.py),
tables wider only under `--wide`, prose wrapped at word boundaries (commands/terminal.py), never cut.

Before: check-trtllm printed a 1,634-character GEMM line, validate-plan a 84- to 131-column table, plan a
684-character legend and pricing lines, plan-placement a 139-character title and truncated its policy names
("lowes…"); each test below fails on that output."""
from __future__ import annotations

import re

import pytest

from dwdp_trtllm import cli
from dwdp_trtllm.commands import terminal

#: a line that is one URL (a reference the output links to): never broken, a broken URL cannot be followed
URL_LINE = re.compile(r"^\s*(\[\d+\] )?\S*https?://\S+$")


def long_lines(text: str, width: int = 80) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln) > width and not URL_LINE.match(ln)]


def run(argv: list[str], capsys, code: int = 0) -> str:
    got = cli.main(argv)
    out = capsys.readouterr()
    assert got == code, (argv, out.out[-2000:], out.err[-2000:])
    return out.out


def test_wrap_keeps_words_whole_and_lines_within_the_width():
    text = "word " * 40 + "docs/bench_results/moeop_deepgemm_2026-12-03/moe_op_vs_trtllm.json and more"
    for out in (terminal.wrap(text), terminal.labelled("GEMM", text)):
        assert max(map(len, out.splitlines())) <= 80
        assert out.split()[-len(text.split()):] == text.split()  # every word, whole, in order
    assert terminal.labelled("verdict", "x " * 50).splitlines()[1].startswith(" " * 16)  # wrapped under its text
    assert terminal.wrap("a\n\nb") == "a\n\nb"  # paragraphs kept


def test_width_follows_columns_at_most_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert terminal.width() == 80
    monkeypatch.setenv("COLUMNS", "60")
    assert terminal.width() == 60
    assert max(map(len, terminal.wrap("abc " * 100).splitlines())) <= 60


def test_check_trtllm_fits(capsys):
    out = run(["check-trtllm"], capsys, code=1)  # no tensorrt_llm here: NOT READY
    assert long_lines(out) == [], long_lines(out)
    assert "GEMM:" in out and "verdict:" in out


def test_check_trtllm_report_with_statuses_fits():
    """A report from an installed TensorRT-LLM (per-target statuses, long module paths) fits too."""
    from dwdp_trtllm.commands.check_trtllm import collect, report_lines

    rep = collect()
    rep["tensorrt_llm"] = "1.3.0rc20"
    for i, t in enumerate(rep["patch_targets"]):
        t["status"] = ("present", "missing", "module not importable: ModuleNotFoundError: No module named "
                       "'tensorrt_llm._torch.pyexecutor.dwdp'")[i % 3]
    text = "\n".join(report_lines(rep))
    assert long_lines(text) == [], long_lines(text)
    assert "    missing  " in text and "ModelLoader.load" in text
