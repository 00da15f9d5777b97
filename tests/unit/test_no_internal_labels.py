"""What a user reads carries no internal labels: the docs (docs/*.md, docs/history/*.md, README.md) and the output
of the commands (a walk-through's runs and every subcommand's --help). Upstream is cited as file + commit + function;
the project's own tracker numbers, build-carry folders and the copies' git state are not the user's.

Before: docs/BENCHMARKS.md carried "(issue N)" 23 times, ".carry" and "stale .git" notes, docs/SIZING.md a
"Not run this session" note, docs/PLANNER.md "(issue 25)": this test fails on those docs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dwdp_trtllm import cli

ROOT = Path(__file__).resolve().parents[2]
#: the labels, each a pattern: tracker references, the build-carry folder, the device copy's git state, the people
#: and sessions that made the work
LABELS = [r"\(issues? \d+\)", r"\bissues? \d+\b", r"\.carry\b", r"stale \.git", r"\bhelpers?\b(?!\.py)", r"\bsessions?\b",
          r"\bthe lead\b"]
LABEL = re.compile("|".join(LABELS), re.I)
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "history").glob("*.md")])


def hits(text: str) -> list[str]:
    """Each line of `text` carrying a label, with the label."""
    return [f"{m.group(0)!r}: {ln.strip()[:160]}" for ln in text.splitlines() for m in [LABEL.search(ln)] if m]


def test_the_patterns_find_what_they_are_for():
    for bad in ("section 1 (issue 5)", "since issue 25 the engine", "`.carry` with CUTLASS", "the device copy's stale .git",
                "Not run this session", "a helper's note"):
        assert hits(bad), bad
    for fine in ("bench_results/session6_2026-12-03/", "issue the copies", "the issue cost of a copy",
                 "upstream's `collector/helper.py` @ 526f823b"):
        assert not hits(fine), fine


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_carry_no_internal_labels(doc):
    assert len(DOCS) >= 10
    assert hits(doc.read_text()) == []


COMMANDS = [["plan", "--dwdp-size", "4,8", "--isl", "8192", "--mnt", "16384", "--verbose"],
            ["plan-placement", "--dwdp-size", "8"],
            ["check-trtllm"],
            ["validate-plan", "docs/bench_results/bench_h200_smoke_2026-12-02/results.json", "--gpu", "h200", "--verbose"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
def test_command_output_carries_no_internal_labels(argv, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the results' relative path
    cli.main(argv)
    out = capsys.readouterr()
    assert out.out.strip() and hits(out.out + out.err) == []


def test_help_carries_no_internal_labels(capsys):
    import argparse

    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 10
    for name, parser in sub.choices.items():
        assert hits(parser.format_help()) == [], name
    assert hits(cli.build_parser().format_help()) == []
