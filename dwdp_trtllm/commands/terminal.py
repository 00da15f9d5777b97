"""Prose as the commands print it: wrapped at word boundaries to the terminal's width, at most 80 columns.

Every command's text output fits 80 columns (tables wider only under a command's `--wide`); a sentence longer than
that is wrapped here, never cut: `wrap` is the one place the width and the wrapping rule live. The width follows
COLUMNS or the terminal (shutil.get_terminal_size), capped at MAX_WIDTH: a wide terminal still gets lines a reader
can follow, a narrow one gets its own width (at least MIN_WIDTH).
"""
from __future__ import annotations

import shutil
import textwrap

#: the widest a line of prose gets, whatever the terminal
MAX_WIDTH = 80
#: below this a terminal's width is not honoured (a wrapped line with a hanging indent would hold a word or two)
MIN_WIDTH = 40


def width() -> int:
    """Columns for prose: COLUMNS or the terminal's width (80 when neither is known), within [MIN_WIDTH, MAX_WIDTH]."""
    cols = shutil.get_terminal_size((MAX_WIDTH, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, cols))


def wrap(text: str, *, indent: str = "", hang: str | int = 2, cols: int | None = None) -> str:
    """`text` wrapped at word boundaries to `cols` (default width()): each line of it (a text may hold several) starts
    with `indent`, its continuation lines with `hang` (a string, or that many spaces after `indent`). A word longer
    than a line (a long path) is kept whole on a line of its own rather than split; where it would then overflow the
    hanging indent, the text is wrapped again under a shallower one (at most 4 columns); a word longer than that
    allows (a long temporary path) overflows its line rather than lose the indent that marks a continuation."""
    cols = cols or width()
    rest = hang if isinstance(hang, str) else indent + " " * hang
    out = []
    for line in text.split("\n"):
        if not line.strip():
            out.append("")
            continue
        for hang_now in dict.fromkeys((rest, rest[:4])):  # never unindented: a continuation stays one
            text_now = textwrap.fill(line, cols, initial_indent=indent, subsequent_indent=hang_now,
                                     break_long_words=False, break_on_hyphens=False)
            if max(map(len, text_now.split("\n"))) <= cols:
                break
        out.append(text_now)
    return "\n".join(out)


def labelled(label: str, text: str, *, pad: int = 16, cols: int | None = None) -> str:
    """'label:         text' with `text` wrapped under itself: the label padded to `pad` columns, continuation lines
    indented as far (check-trtllm's report lines)."""
    head = f"{label}:".ljust(pad - 1) + " "
    return wrap(text, indent=head, hang=" " * len(head), cols=cols)


def paragraphs(doc: str) -> str:
    """A docstring as `--help` shows it (with argparse.RawDescriptionHelpFormatter): each paragraph (lines separated by
    a blank line) joined and wrapped to width(), the blank lines kept. A paragraph whose lines are indented or
    bulleted (usage lines, lists) keeps its lines; each is wrapped on its own under its indent."""
    import inspect

    out = []
    for p in inspect.cleandoc(doc or "").split("\n\n"):
        lines = [ln for ln in p.split("\n") if ln.strip()]
        if not lines:
            continue
        if any(ln.startswith((" ", "- ", "* ")) for ln in lines):
            for ln in lines:
                lead = ln[:len(ln) - len(ln.lstrip())]
                bullet = "  " if ln.lstrip().startswith(("- ", "* ")) else ""
                out.append(wrap(ln.strip(), indent=lead, hang=lead + bullet + "  "))
        else:
            out.append(wrap(" ".join(" ".join(lines).split()), hang=0))
        out.append("")
    return "\n".join(out).rstrip("\n")
