#!/usr/bin/env python3
"""Price every published DWDP number with `dwdp plan` and print docs/PLANNER.md's validation table.

    python3 scripts/validate_published.py            # the markdown table on stdout
    python3 scripts/validate_published.py --write    # also: the table into docs/PLANNER.md (between its
                                                     # validation markers) and the errors into pinned_errors.json

Rows: dwdp_trtllm/data/validation/published.yaml. The pins are what tests/unit/test_published_validation.py holds.
CPU only; takes ~15 s. Exit 1 when a row disagrees beyond its tolerance without a named missing effect.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dwdp_trtllm.bench.report import write_atomic  # noqa: E402
from dwdp_trtllm.commands.published import DATA_FILE, markdown, validate  # noqa: E402

PINS = DATA_FILE.parent / "pinned_errors.json"
DOC = ROOT / "docs" / "PLANNER.md"
BEGIN, END = "<!-- validation-table:begin -->", "<!-- validation-table:end -->"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the table into docs/PLANNER.md and the pins")
    args = ap.parse_args()
    results = validate()
    table = markdown(results)
    print(table)
    bad = [r.row.id for r in results if r.error is not None and not r.agrees and not r.row.missing_effect]
    if args.write:
        pins = {r.row.id: None if r.error is None else round(r.error, 4) for r in results}
        write_atomic(PINS, json.dumps(pins, indent=1) + "\n")
        doc = DOC.read_text()
        if BEGIN not in doc or END not in doc:
            print(f"{DOC}: no {BEGIN} / {END} markers; table not written", file=sys.stderr)
            return 2
        head, rest = doc.split(BEGIN, 1)
        write_atomic(DOC, head + BEGIN + "\n" + table + END + rest.split(END, 1)[1])
    if bad:
        print(f"disagree beyond tolerance with no named missing effect: {', '.join(bad)}", file=sys.stderr)
        return 1
    n_ok = sum(r.agrees for r in results)
    out = [r for r in results if r.error is not None and not r.agrees]
    n_abl = sum(r.explained for r in out)
    print(f"{n_ok} of {len(results)} rows within tolerance; of the {len(out)} outside it, {n_abl} explained by an "
          f"ablation within tolerance, {len(out) - n_abl} named in words only (no ablation: not counted as explained)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
