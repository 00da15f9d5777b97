"""The FP8 grouped GEMM variants are named in three places that must agree (ops/build.py FP8_VARIANTS compiles them,
plugins/include/dwdp/grouped_gemm.h DWDP_FP8_VARIANTS declares and dispatches them, one .cu each defines them), the
committed dispatch header only names variants of that list, and $DWDP_OPS_EXCLUDE leaves out FP8 variants only."""
from __future__ import annotations

import re

import pytest

from dwdp_trtllm import env
from dwdp_trtllm.ops import build


def _header_list() -> list[str]:
    text = (build.plugins_dir() / "include" / "dwdp" / "grouped_gemm.h").read_text()
    block = re.search(r"#define DWDP_FP8_VARIANTS\(X\)((?:[^\n]*\\\n)*[^\n]*)", text)
    assert block, "DWDP_FP8_VARIANTS not found in grouped_gemm.h"
    return re.findall(r"X\((\w+)\)", block.group(1))


def test_build_list_header_list_and_sources_agree():
    assert list(build.FP8_VARIANTS) == _header_list()
    csrc = build.plugins_dir() / "csrc"
    on_disk = sorted(p.name for p in csrc.glob("grouped_gemm_fp8_*.cu"))
    assert on_disk == sorted(f"grouped_gemm_fp8_{v}.cu" for v in build.FP8_VARIANTS)
    for v in build.FP8_VARIANTS:  # each file defines the variant its name says
        assert f"DWDP_DEFINE_FP8_VARIANT({v}," in (csrc / f"grouped_gemm_fp8_{v}.cu").read_text()


def test_dispatch_header_names_built_variants_only():
    text = (build.plugins_dir() / "csrc" / "grouped_gemm_fp8_dispatch.h").read_text()
    named = set(re.findall(r'"(\w+)"', text))
    assert named and named <= set(build.FP8_VARIANTS), named - set(build.FP8_VARIANTS)
    fallback = re.search(r'kFp8FallbackVariant = "(\w+)"', text)
    assert fallback and fallback.group(1) in build.FP8_VARIANTS


@pytest.mark.parametrize("src", ["grouped_gemm_fp8_coop_128x128_c2x2.cu", "grouped_gemm_bf16_coop_c2x1.cu"])
def test_exclude_leaves_out_optional_variants_only(monkeypatch, src):
    """Only the variants the glue reaches through weak symbols may be left out (each has a fallback there)."""
    monkeypatch.setenv(env.DWDP_OPS_EXCLUDE, f" {src} ,")
    assert build.excluded_sources() == (src,)
    names = [p.name for p in build._source_files(cuda=True)]
    assert src not in names and "grouped_gemm_cuda.cpp" in names and len(names) == len(build.CPU_SOURCES) + len(build.CUDA_SOURCES) - 1
    glue = (build.plugins_dir() / "csrc" / "grouped_gemm_cuda.cpp").read_text()
    stem = src.removeprefix("grouped_gemm_").removesuffix(".cu")
    weak = stem.startswith("fp8_") or f"__attribute__((weak)) const char* grouped_gemm_{stem}(" in glue
    assert weak, f"{src} may be left out, but the glue links it strongly"
    for bad in ("grouped_gemm_cuda.cpp", "grouped_gemm_fp8_nope.cu", "grouped_gemm_bf16_coop.cu"):
        monkeypatch.setenv(env.DWDP_OPS_EXCLUDE, bad)
        with pytest.raises(build.OpsBuildError, match=env.DWDP_OPS_EXCLUDE):
            build.excluded_sources()
