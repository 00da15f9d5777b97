"""gen-config's terminal output within 80 columns (pure): prose wrapped at spaces, shell lines continued with `\\`.

Paths and other words longer than a line are never broken (a path stays copyable); a shell line is cut only between
words outside quotes, each cut ending in ` \\` so the printed lines paste as one command.
"""
from __future__ import annotations

import textwrap

WIDTH = 80


#: units kept on the line of their number ("141.0 GB", never "141.0" / "GB")
_UNITS = (" GB", " MiB")
_GLUE = "\x1f"  # not whitespace to textwrap: a number and its unit wrap as one word


def prose(line: str, width: int = WIDTH) -> list[str]:
    """`line` wrapped to `width`; continuation lines indented two spaces more than the line itself."""
    if len(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip())]
    body = line.strip()
    for u in _UNITS:
        body = body.replace(u, _GLUE + u[1:])
    lines = textwrap.wrap(body, width, initial_indent=lead, subsequent_indent=lead + "  ", break_long_words=False,
                          break_on_hyphens=False)
    return [w.replace(_GLUE, " ") for w in lines]


def _words(line: str) -> list[str]:
    """Words of a shell line split at spaces outside single or double quotes."""
    out, cur, quote = [], "", None
    for ch in line:
        if quote:
            cur += ch
            quote = None if ch == quote else quote
        elif ch in "\"'":
            cur, quote = cur + ch, ch
        elif ch == " ":
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + ([cur] if cur else [])


def shell(line: str, width: int = WIDTH) -> list[str]:
    """A shell command as lines of at most `width` (one word longer than that stays whole), cut between words with a
    trailing ` \\`; a trailing `# comment` goes on its own line before the command (a `\\` inside a comment would
    not continue it)."""
    cmd, sep, comment = line.partition("   # ")
    head = prose("# " + comment.strip(), width) if sep else []
    words, lines, cur = _words(cmd.strip()), [], ""
    for w in words:
        indent = "    " if lines else ""
        if cur and len(indent + cur + " " + w) > width - 2:
            lines.append(indent + cur + " \\")
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(("    " if lines else "") + cur)
    return head + lines
