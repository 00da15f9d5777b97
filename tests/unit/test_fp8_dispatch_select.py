"""scripts/fp8_dispatch_select.py: the rule that turns one tuning run into the FP8 grouped GEMM's production dispatch."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import fp8_dispatch_select as sel  # noqa: E402

FC1, FC2 = (4096, 7168), (7168, 2048)


def rows_for(table, same=True, ok=True):
    """table: {variant: {tokens: tflops}} for both shapes and both routings."""
    out = []
    for n, k in (FC1, FC2):
        for v, by_t in table.items():
            for t, tf in by_t.items():
                for rt in ("uniform", "skewed"):
                    out.append(dict(N=n, K=k, tokens=t, rows=8 * t, E=256, routing=rt, variant=v, raster=0, swizzle=0,
                                    tflops=tf, ok=ok if v != sel.FALLBACK else True,
                                    same_as_fallback=same if v != sel.FALLBACK else True))
    return out


def test_winner_needs_more_than_the_margin():
    c = sel.choose(rows_for({sel.FALLBACK: {4096: 900, 16384: 900}, "b": {4096: 910, 16384: 910}}))
    assert c["shapes"][FC1]["all"] == (sel.FALLBACK, 0, 0)  # 1.1% faster: noise, the incumbent stays
    c = sel.choose(rows_for({sel.FALLBACK: {4096: 900, 16384: 900}, "b": {4096: 1000, 16384: 1000}}))
    assert c["shapes"][FC1]["all"] == ("b", 0, 0) and c["other"] == ("b", 0, 0)


def test_failed_check_excludes_a_candidate():
    c = sel.choose(rows_for({sel.FALLBACK: {4096: 900}, "b": {4096: 2000}}, ok=False))
    assert c["shapes"][FC2]["all"] == (sel.FALLBACK, 0, 0)


def test_split_on_rows_only_when_bit_identical():
    table = {sel.FALLBACK: {4096: 900, 16384: 900}, "few": {4096: 1000, 16384: 800}, "many": {4096: 800, 16384: 1000}}
    c = sel.choose(rows_for(table, same=True))
    assert c["shapes"][FC1] == {"all": ("many", 0, 0), "few": ("few", 0, 0)}
    c = sel.choose(rows_for(table, same=False))
    assert c["split_allowed"] is False and c["shapes"][FC1]["few"] is None


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the header")
def test_header_compiles_and_dispatches(tmp_path):
    table = {sel.FALLBACK: {4096: 900, 16384: 900}, "few": {4096: 1000, 16384: 800}, "many": {4096: 800, 16384: 1000}}
    (tmp_path / "d.h").write_text(sel.header(sel.choose(rows_for(table)), "a test"))
    (tmp_path / "m.cpp").write_text('#include "d.h"\n#include <cstdio>\nint main() { auto a = dwdp::fp8_default_choice('
                                    '8 * 4096, 256, 4096, 7168), b = dwdp::fp8_default_choice(8 * 16384, 256, 4096, 7168);'
                                    ' std::printf("%s %s", a.variant, b.variant); }\n')
    subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-o", str(tmp_path / "m"), str(tmp_path / "m.cpp")], check=True)
    assert subprocess.run([str(tmp_path / "m")], capture_output=True, text=True).stdout == "few many"
