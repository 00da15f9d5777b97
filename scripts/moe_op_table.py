#!/usr/bin/env python3
"""Write a GPU's shipped table of this project's whole routed-expert op from a `dwdp calibrate` file's `moe_op`
record (dwdp_trtllm/data/moe_op/<gpu>.json, dwdp_trtllm/data/moe_op/README.md): the record replaces the table's
record of the same (gemm, weight dtype, expert shapes), or joins it; the other records stay.

    dwdp calibrate --gpus 1 --out h100.json              # on the GPU: measures the op (and the GEMM-only rates)
    python3 scripts/moe_op_table.py h100.json            # -> dwdp_trtllm/data/moe_op/h100.json (GPU from the record)
    python3 scripts/moe_op_table.py h200.json --gpu h200 --out /tmp/h200.json

The GPU is the shipped name (h100, h200, b200, gb200) the record's measured GPU matches (e.g. "NVIDIA H100 80GB
HBM3" -> h100), or --gpu (refused when the record was measured on another GPU). A CPU functional check's file is
refused (its numbers describe no GPU). Bad input: exit 2 with one line naming the file / flag.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dwdp_trtllm.spec.schema import ConfigError  # noqa: E402

#: the GPUs a table can be shipped for (perf/hardware's shipped NVIDIA specs)
GPUS = ("h100", "h200", "b200", "gb200")


def table_from_calibration(cal_path: str, gpu: str | None = None, out: str | None = None) -> tuple[Path, dict]:
    """(path, table) the GPU's table becomes with the calibration file's moe_op record (perf/moe_op.table_with over
    the table at `out`, default the package's file for the GPU, when it exists)."""
    from dwdp_trtllm.perf.calibration import load_calibration
    from dwdp_trtllm.perf.moe_op import gpu_matches, read_table, table_with

    cal = load_calibration(cal_path)
    rec = cal.moe_op
    if not rec:
        raise ConfigError(cal_path, "moe_op", "missing: run `dwdp calibrate` (its whole routed-expert op step) on the GPU")
    dev = rec["source"]["gpu"]
    if gpu is None:
        hits = [g for g in GPUS if gpu_matches(dev, g)]
        if len(hits) != 1:
            raise ConfigError(None, "--gpu", f"the record was measured on {dev!r}: name the table's GPU ({', '.join(GPUS)})")
        gpu = hits[0]
    elif gpu not in GPUS:
        raise ConfigError(None, "--gpu", f"expected one of {', '.join(GPUS)}, got {gpu!r}")
    path = Path(out) if out else Path(__file__).resolve().parents[1] / "dwdp_trtllm" / "data" / "moe_op" / f"{gpu}.json"
    old = read_table(path) if path.exists() else None
    return path, table_with(rec, gpu, old)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("calibration", help="a `dwdp calibrate` file with a moe_op record")
    ap.add_argument("--gpu", default=None, help=f"the table's GPU ({', '.join(GPUS)}; default: the record's)")
    ap.add_argument("--out", default=None, help="the table file (default dwdp_trtllm/data/moe_op/<gpu>.json)")
    args = ap.parse_args(argv)
    from dwdp_trtllm.bench.report import write_atomic
    from dwdp_trtllm.perf.moe_op import dumps_table
    try:
        path, table = table_from_calibration(args.calibration, args.gpu, args.out)
    except ConfigError as e:
        print(f"moe_op_table: {e}", file=sys.stderr)
        return 2
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dumps_table(table))
    for r in table["records"]:
        s = r["source"]
        rows = "; ".join(f"{d} " + " / ".join(f"{ms:.2f}" for _, ms in v) + " ms at "
                         + " / ".join(f"{t // 1024}K" for t, _ in v) for d, v in r["ms"].items())
        print(f"{path}: {r['weight_dtype']} {r['gemm']} {r['model']['name']} on {s['gpu']} ({s['date']}, commit "
              f"{s['commit']}): {rows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
