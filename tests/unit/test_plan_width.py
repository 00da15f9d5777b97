"""`dwdp plan` fits the terminal (issue 34 item 9): the default table fits 60 and 80 columns, every column is behind
--wide (and in --json); prose is wrapped at word boundaries within the terminal's width, at most 80 columns (never cut
mid-phrase)."""
from __future__ import annotations

import pytest

from dwdp_trtllm.cli import main

ARGS = ["plan", "--model", "deepseek-r1", "--gpu", "h200", "--dwdp-size", "4,8", "--mnt", "16384",
        "--isl", "4096,8192,16384", "--redundant-experts", "0,2"]


def _out(capsys, monkeypatch, cols: int, *extra) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(cols))
    assert main([*ARGS, *extra]) == 0
    return capsys.readouterr().out.splitlines()


def _table(lines: list[str]) -> list[str]:
    """The lines between the title (first line and its wrapped continuation) and the legend."""
    start = next(i for i, ln in enumerate(lines) if i and not ln.startswith("  "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("DEP, DWDP: ms per MoE layer"))
    return lines[start:end]


def _paragraph(lines: list[str], first: int) -> str:
    """lines[first] and its wrapped continuation (indented 2, not a '  - ' note), as one line."""
    end = next((i for i in range(first + 1, len(lines)) if not lines[i].startswith("  ") or lines[i].startswith("  - ")),
               len(lines))
    return " ".join(" ".join(lines[first:end]).split())


@pytest.mark.parametrize("cols", [60, 80])
def test_default_table_fits_the_terminal(capsys, monkeypatch, cols):
    lines = _out(capsys, monkeypatch, cols, "--gemm", "merge")  # TensorRT-LLM's table: a marginal recommendation
    table = _table(lines)
    assert len(table) >= 2 * (2 + 12)  # per DEP variant: header, rule, 2 G x 2 redundancies x 3 ISLs
    assert max(len(ln) for ln in table) <= cols  # the "against ..." headings too
    rows = [ln.split() for ln in table if ln.lstrip()[:1].isdigit()]
    assert len(rows) == 24 and all(r[-1] in ("DWDP", "DEP", "marginal") or r[-2:] == ["nothing", "fits"] for r in rows)
    assert all("…" not in ln for ln in table)  # no cell cut
    assert max(len(ln) for ln in lines if "https://" not in ln) <= cols  # prose wraps within the terminal
    rec = _paragraph(lines, next(i for i, ln in enumerate(lines) if ln.startswith("recommendation against trtllm: ")))
    # one paragraph, whole: what it depends on and how to settle it (uncertainty.SETTLE) to its end
    assert "depends on" in rec and any(x in rec for x in ("`dwdp calibrate`", "state it with --", "a smaller --mnt"))


def test_wide_table_has_every_column(capsys, monkeypatch):
    lines = _out(capsys, monkeypatch, 80, "--wide")
    head = next(ln for ln in lines if "T_prefetch" in ln)
    for col in ("GB/rank", "T_compute", "T_comm", "T_sync", "hides at", "red."):
        assert col in head
