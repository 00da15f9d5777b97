"""Bytes as a user reads them: the units and the one formatter, `fmt_bytes` (pure; imports nothing of the package).

One unit per quantity:
- memory: per rank (memory.py's parts and totals, `dwdp bench`'s measured peaks), free host / device / /dev/shm
  memory, bytes fetched per layer, one expert: GB = 1e9 bytes, the unit GPU datasheets print (H200: 141 GB), of
  the flags `--gpu-memory-gb` and the JSON keys `*_gb`;
- copy slice sizes and allocation granularities: MiB = 2**20 bytes, the unit they are given in (`dwdp plan
  --slice-bytes 2MiB`, dwdp.slice_bytes, CUDA VMM's 2 MiB granularity).
Every message, table and plot label that shows a byte count formats it here (tests/unit/test_byte_units.py finds
hand-rolled copies).
"""
from __future__ import annotations

GB = 10 ** 9
MiB = 1 << 20
UNITS = {"GB": GB, "MiB": MiB}


def fmt_bytes(nbytes: float, unit: str = "GB", *, digits: int | None = 2, exact: bool = False) -> str:
    """`nbytes` in `unit` (GB or MiB), the unit named. One unit or more: `digits` decimals (None: the shortest form,
    '2 MiB', '141 GB'); below one unit: 3 significant digits, so that a 64 MiB /dev/shm does not read '0.00 GB';
    exact: below one unit the byte count too ('0.0671 GB (67,108,864 bytes)')."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: expected one of {', '.join(UNITS)}")
    v = nbytes / UNITS[unit]
    if v == 0 or abs(v) >= 1:
        return f"{v:g} {unit}" if digits is None else f"{v:.{digits}f} {unit}"
    return f"{v:.3g} {unit}" + (f" ({int(nbytes):,} bytes)" if exact else "")
