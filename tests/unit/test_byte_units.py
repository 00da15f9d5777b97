"""Bytes reach a user through one formatter (byte_units.fmt_bytes), in one unit per quantity; no module keeps a
hand-rolled copy (a bytes-to-unit conversion inside an f-string followed by the unit's name)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dwdp_trtllm.byte_units import GB, MiB, fmt_bytes

PKG = Path(__file__).resolve().parents[2] / "dwdp_trtllm"

#: a conversion of bytes into a unit (/ 1e9, / GB, / mem.GB, / MiB, / 1024, >> 20, // 2**20, gb(...)) inside an
#: f-string placeholder that the name of a byte unit follows: a formatter of its own (rates such as GB/s excluded)
HAND_ROLLED = re.compile(
    r"\{[^{}\n]*?(?:/\s*(?:1e[369]|10\s*\*\*\s*[369]|1024|\(?1\s*<<\s*[123]0\)?|2\s*\*\*\s*[123]0|(?:\w+\.)?(?:GB|GiB|MB|MiB|KiB))"
    r"|>>\s*[123]0|//\s*(?:2\s*\*\*\s*[123]0|1024)|\bgb\()[^{}\n]*\}\s*(?:GB|GiB|MB|MiB|KiB|kB)\b(?!/)")


@pytest.mark.parametrize("args, kw, text", [
    ((141 * GB,), {}, "141.00 GB"),
    ((141 * GB,), {"digits": None}, "141 GB"),  # gen-config's GPU budget
    ((128.04 * GB,), {"digits": 1}, "128.0 GB"),  # memory.RankMemory.describe
    ((44_040_192,), {}, "0.044 GB"),  # one DeepSeek-R1 FP8 expert: 3 significant digits below 1 GB, not 0.04
    ((67_108_864,), {"exact": True}, "0.0671 GB (67,108,864 bytes)"),  # a 64 MiB /dev/shm (preflight)
    ((3 * GB,), {"exact": True}, "3.00 GB"),  # exact adds the bytes only below one unit
    ((0,), {}, "0.00 GB"),
    ((2 * MiB, "MiB"), {"digits": None}, "2 MiB"),  # slice sizes, VMM granularity
    ((512 * 1024, "MiB"), {"digits": None}, "0.5 MiB"),
])
def test_fmt_bytes(args, kw, text):
    assert fmt_bytes(*args, **kw) == text


def test_fmt_bytes_refuses_other_units():
    with pytest.raises(ValueError, match="GB, MiB"):
        fmt_bytes(1, "MB")


def test_the_pattern_finds_the_copies_this_replaced():
    """The check below can fail: each formatter the package had before byte_units is a hit."""
    removed = ['return f"{n / 1e9:.2f} GB" if n >= 10 ** 9 else f"{n / 1e9:.3g} GB ({n:,} bytes)"',  # host_resources
               'return f"{n / MiB:g} MiB" if n >= MiB else f"{n / 1024:g} KiB"',  # perf/recommend
               'return f"{n / mem.GB:.2f} GB" if n >= mem.GB else f"{n / 1e6:.1f} MB"',  # commands/plan_placement
               'f"{name} per rank {gb(self.total):.1f} GB{budget}: {parts} GB"',  # memory.RankMemory.describe
               'f"({gpu_bytes / mem.GB:g} GB): "', 'f"multiple of the {gran >> 20} MiB VMM "',
               'f"multiples of {gran // 2**20} MiB)"']
    assert all(HAND_ROLLED.search(line) for line in removed)
    assert not HAND_ROLLED.search('f"{nbytes / ms / 1e6:.0f} GB/s"') and not HAND_ROLLED.search('f"{x:.1f} GB"')


def test_no_module_formats_bytes_itself():
    hits = [f"{path.relative_to(PKG.parent)}:{i}: {line.strip()}"
            for path in sorted(PKG.rglob("*.py")) if path.name != "byte_units.py"
            for i, line in enumerate(path.read_text().splitlines(), 1) if HAND_ROLLED.search(line)]
    assert not hits, "format bytes with byte_units.fmt_bytes:\n" + "\n".join(hits)
    defs = [f"{path.relative_to(PKG.parent)}: {m.group(0)}" for path in sorted(PKG.rglob("*.py"))
            if path.name != "byte_units.py"
            for m in re.finditer(r"def (?:\w*fmt_gb\w*|_?fmt_bytes|\w*human_bytes\w*)\(", path.read_text())]
    assert not defs, defs
