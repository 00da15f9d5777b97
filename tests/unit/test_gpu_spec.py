"""GPU spec files (dwdp_trtllm/data/gpus/*.yaml) and their loader (perf/hardware.py)."""
from __future__ import annotations

import re

import pytest
import yaml

from dwdp_trtllm.perf.hardware import GPUS, SPEC_DIR, get_gpu, load_gpu_spec
from dwdp_trtllm.spec.schema import ConfigError

SHIPPED = ("h100", "h200", "b200", "gb200", "mi355x")


def test_shipped_gpus_are_files():
    assert set(SHIPPED) <= set(GPUS)
    for name in SHIPPED:
        spec = GPUS[name]
        assert spec.source.endswith(f"{name}.yaml") and spec.name == name


def test_every_number_in_a_shipped_file_names_its_source():
    """Each numeric line carries a comment (datasheet, MEASURED, PUBLIC REPORT or ASSUMPTION), on the line or in the
    comment block of its section."""
    for path in SPEC_DIR.glob("*.yaml"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^\s*\w+:\s*-?[0-9.]+\s*(#|$)", line):
                header = [x for x in lines[:i] if x.lstrip().startswith("#")]
                assert "#" in line or header, f"{path.name}:{i + 1} has no source: {line!r}"


def test_hopper_numbers_as_measured():
    """The H200 file reproduces the efficiencies measured on our H200 (DESIGN.md s5)."""
    h200 = GPUS["h200"]
    assert h200.matmul_tflops("bf16") == pytest.approx(760.0)
    assert h200.matmul_tflops("fp8") == pytest.approx(1091.0)
    assert h200.matmul_tflops("nvfp4") == pytest.approx(1091.0)  # no FP4 tensor cores: FP8
    assert h200.matmul_tflops("mxfp4") == h200.matmul_tflops("nvfp4")
    assert GPUS["b200"].matmul_tflops("mxfp4") == pytest.approx(9000 * 0.7)  # FP4 tensor cores
    assert h200.hbm_bytes_per_s == pytest.approx(4.19e12)
    assert h200.peer_bytes_per_s == pytest.approx(375e9)
    assert h200.copy_engines == 3 and h200.memory_gb == 141 and h200.tdp_w == 700


def test_mesh_peer_bandwidth_depends_on_group():
    """MI355X: one Infinity Fabric link per peer, so DWDP4 pulls over 3 links and DWDP8 over 7; the 3-link figure is
    the ROCm port's measured 169.2 GiB/s."""
    mi = GPUS["mi355x"]
    assert mi.peer_topology == "mesh" and mi.peer_links == 7
    assert mi.peer_bytes_per_s_for(4) == pytest.approx(169.2 * 2 ** 30, rel=0.01)
    assert mi.peer_bytes_per_s_for(8) == pytest.approx(mi.peer_bytes_per_s)
    assert mi.peer_bytes_per_s_for(8) / mi.peer_bytes_per_s_for(4) == pytest.approx(7 / 3)
    h = GPUS["h200"]  # a switch: the same at any group
    assert h.peer_bytes_per_s_for(2) == h.peer_bytes_per_s_for(8) == h.peer_bytes_per_s


def _write(tmp_path, data, name="my.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _base():
    return yaml.safe_load((SPEC_DIR / "h200.yaml").read_text())


def test_user_file_loads_and_get_gpu_takes_a_path(tmp_path):
    data = _base()
    data["name"] = "h20"
    data["dense_tflops"] = {"bf16": 148.0, "fp8": 296.0, "fp4": None}
    p = _write(tmp_path, data)
    spec = get_gpu(str(p))
    assert spec.name == "h20" and spec.bf16_tflops == 148.0 and spec.fp4_tflops is None
    assert spec.source == str(p)


@pytest.mark.parametrize("edit, key, words", [
    (lambda d: d.pop("memory_gb"), "memory_gb", "required"),
    (lambda d: d.update(memory_gb="lots"), "memory_gb", "expected a number"),
    (lambda d: d.update(memory_gb=-1), "memory_gb", "expected a number in"),
    (lambda d: d.update(colour="green"), "colour", "unknown key"),
    (lambda d: d["peer"].update(copy_efficiency=1.5), "peer.copy_efficiency", "(0, 1]"),
    (lambda d: d["peer"].update(topology="ring"), "peer.topology", "'switch' or 'mesh'"),
    (lambda d: d["peer"].update(bandwidth=3), "peer.bandwidth", "unknown key"),
    (lambda d: d["efficiency"]["gemm"].pop("fp8"), "efficiency.gemm", "exactly the keys"),
    (lambda d: d["dense_tflops"].update(bf16=True), "dense_tflops.bf16", "expected a number"),
    (lambda d: d.update(peer=[1, 2]), "peer", "expected a mapping"),
    (lambda d: d.update(name=""), "name", "non-empty string"),
])
def test_bad_file_names_file_and_key(tmp_path, edit, key, words):
    data = _base()
    edit(data)
    p = _write(tmp_path, data)
    with pytest.raises(ConfigError) as e:
        load_gpu_spec(p)
    assert e.value.file == str(p) and e.value.key == key and words in e.value.expected, str(e.value)


def test_missing_or_non_yaml_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_gpu_spec(tmp_path / "none.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_gpu_spec(p)


def test_unknown_name_lists_the_shipped_and_the_file_option():
    with pytest.raises(ValueError, match="mi355x.*GPU spec file"):
        get_gpu("tpu9")


def test_planner_prices_mesh_pulls_per_group():
    """A mesh GPU's prefetch and all-to-all use one link per peer: at G=4 on MI355X (3 links) a pulled byte costs
    7/3 of its G=8 price (7 links); on a switch (H200) the per-byte price does not depend on G."""
    from dwdp_trtllm.spec.models import get_model
    from dwdp_trtllm.perf import cost_model as cm
    from dwdp_trtllm.core.placement import make_placement
    from dwdp_trtllm.spec.config import DwdpConfig

    m = get_model("deepseek-r1")
    per_byte = {}
    for gpu in ("mi355x", "h200"):
        p = cm.CostParams(gpu=GPUS[gpu], weight_dtype="fp8")
        for g in (4, 8):
            pl = make_placement(DwdpConfig(dwdp_size=g), m.num_experts)
            dest, src = cm.fetch_bytes(m, pl, "fp8")
            per_byte[gpu, g] = cm.prefetch_us(m, p, pl, 0) / max(dest, src) / cm.contention_factor(p, g, False)
    assert per_byte["mi355x", 4] / per_byte["mi355x", 8] == pytest.approx(7 / 3)
    assert per_byte["h200", 4] == pytest.approx(per_byte["h200", 8])
