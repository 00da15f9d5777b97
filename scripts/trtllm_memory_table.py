#!/usr/bin/env python3
"""Render the memory table of every shipped gen-config example into docs/TRTLLM.md (between the memory-table markers).

    python3 scripts/trtllm_memory_table.py            # rewrite the table in docs/TRTLLM.md
    python3 scripts/trtllm_memory_table.py --check    # exit 1 if the table is out of date

Each example under configs/disagg/ and configs/serve/ records in its commands.sh the `dwdp gen-config` arguments
that wrote it; this script re-runs gen-config with them (--json, into a temporary directory) and prints every
server's per-rank memory as gen-config prices it (memory.rank_memory, GB = 1e9 bytes).
tests/unit/test_trtllm_gen_config.py runs --check, so the table cannot drift from the code.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dwdp_trtllm import cli  # noqa: E402
from dwdp_trtllm.deploy.memory import PARTS  # noqa: E402

DOC = ROOT / "docs" / "TRTLLM.md"
START, END = "<!-- memory-table:start (scripts/trtllm_memory_table.py) -->", "<!-- memory-table:end -->"
PREFIX = "# dwdp gen-config "


def examples() -> list[tuple[str, list[str]]]:
    """(configs/<sub>/<name>, gen-config arguments) of every shipped example, sorted."""
    out = []
    for sh in sorted(ROOT.glob("configs/*/*/commands.sh")):
        line = next((ln for ln in sh.read_text().splitlines() if ln.startswith(PREFIX)), None)
        if line is None:
            raise SystemExit(f"{sh}: no '{PREFIX}...' line: regenerate it with dwdp gen-config")
        args = shlex.split(line[len(PREFIX):])
        out.append((str(sh.parent.relative_to(ROOT)), args[: args.index("--out")]))
    return out


def price(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()) as buf:
        rc = cli.main(["gen-config", *args, "--out", str(Path(tmp) / "o"), "--json"])
    if rc != 0:
        raise SystemExit(f"dwdp gen-config {shlex.join(args)} failed ({rc})")
    return json.loads(buf.getvalue())


def table() -> str:
    head = ["example", "server (one rank)", *(f"{v} (GB)" for v in PARTS.values()), "total (GB)", "GPU (GB)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, args in examples():
        rep = price(args)
        mem = rep["memory"]
        c = mem["context_dwdp"]
        rows = [(f"{'context' if 'disagg' in name else 'aggregated'}: DWDP{c['group_size']}", c)]
        if mem.get("generation"):
            rows.append((f"generation: DEP{rep['gen_tp']} (attention DP)", mem["generation"]))
        for i, (server, m) in enumerate(rows):
            label = f"`{name}` ({rep['summary'].split(':')[0]}, {m['weight_dtype']})" if i == 0 else ""
            cells = [f"{m[f'{p}_gb']:.1f}" for p in PARTS]
            lines.append(f"| {label} | {server} | " + " | ".join(cells)
                         + f" | {m['total_gb']:.1f} | {m['gpu_gb']:g} {mem['gpu']} |")
    return "\n".join(lines) + "\n"


def render(doc: str) -> str:
    a, b = doc.index(START) + len(START), doc.index(END)
    return doc[:a] + "\n" + table() + doc[b:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/TRTLLM.md's table is out of date")
    a = ap.parse_args()
    doc = DOC.read_text()
    new = render(doc)
    if a.check:
        if new != doc:
            print("docs/TRTLLM.md memory table is out of date: run python3 scripts/trtllm_memory_table.py", file=sys.stderr)
            return 1
        return 0
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(new)
    tmp.replace(DOC)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
