"""Reading the commands' wrapped prose in tests: a line and its indented continuation lines as one text."""


def paragraph(out: str, prefix: str) -> str:
    """The line starting with prefix and its indented continuation lines (the commands' prose wraps at 80 columns),
    joined with single spaces."""
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(prefix))
    block = [lines[i]]
    for ln in lines[i + 1:]:
        if not ln.startswith(" ") or not ln.strip():
            break
        block.append(ln)
    return " ".join(" ".join(block).split())
