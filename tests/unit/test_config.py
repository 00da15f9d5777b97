"""Config loading: every error class names the file and the dotted key; sweeps; --set overrides; docs in sync."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from dwdp_trtllm import cli
from dwdp_trtllm.spec.config import BenchConfig, DwdpConfig, load_bench_points, load_dwdp_config
from dwdp_trtllm.spec.schema import ConfigError, apply_override, from_dict, load_yaml, parse_override

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "bench.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def load_bench(path: Path) -> list[BenchConfig]:
    return load_bench_points(load_yaml(path), file=str(path))[1]


def expect_error(path: Path, key: str, *fragments: str) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load_bench(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}: {key}: "), msg
    assert ei.value.file == str(path) and ei.value.key == key
    for f in fragments:
        assert f in msg, (f, msg)
    return ei.value


# ---- error classes ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, key, fragments", [
    ("modle: {}\n", "modle", ["unknown key", "model"]),
    ("dwdp:\n  dwdp_sise: 2\n", "dwdp.dwdp_sise", ["unknown key", "dwdp_size"]),
    ("run:\n  ranks: four\n", "run.ranks", ["expected an integer", "'four'"]),
    ("run:\n  ranks: true\n", "run.ranks", ["expected an integer"]),
    ("dwdp:\n  contention_opt: 1\n", "dwdp.contention_opt", ["expected true or false"]),
    ("workload:\n  isl_ratio: high\n", "workload.isl_ratio", ["expected a number"]),
    ("model:\n  num_layers: 2.5\n", "model.num_layers", ["int or null"]),
    ("dwdp: 3\n", "dwdp", ["expected a mapping"]),
    ("run:\n  modes: dwdp\n", "run.modes", ["expected a list"]),
    ("dwdp:\n  weight_dtype: fp4\n", "dwdp.weight_dtype", ["one of 'float32', 'bf16', 'fp8'", "'fp4'"]),
    ("run:\n  modes: [dep, tp]\n", "run.modes[1]", ["one of 'dep', 'dwdp', 'reference'"]),
    ("run:\n  device: tpu\n", "run.device", ["'cpu', 'cuda'"]),
    ("model:\n  preset: gpt5\n", "model.preset", ["unknown model preset", "deepseek-r1"]),
    ("dwdp:\n  slice_bytes: 1000\n", "dwdp.slice_bytes", ["multiple of 256", "1000"]),
    ("dwdp:\n  slice_bytes: 0\n", "dwdp.slice_bytes", ["multiple of 256"]),
    ("dwdp:\n  dwdp_size: 0\n", "dwdp.dwdp_size", [">= 1"]),
    ("dwdp:\n  redundant_experts: -1\n", "dwdp.redundant_experts", [">= 0"]),
    ("dwdp:\n  dwdp_size: 8\nrun:\n  ranks: 4\n", "dwdp.dwdp_size", ["larger than the world of 4"]),
    ("dwdp:\n  dwdp_size: 3\nrun:\n  ranks: 4\n", "dwdp.dwdp_size", ["not a whole number of groups"]),
    ("model:\n  preset: tiny\ndwdp:\n  dwdp_size: 2\n  redundant_experts: 16\nrun:\n  ranks: 2\n",
     "dwdp.redundant_experts", ["exceed the model's 16 experts"]),
    # upstream ranges: 3*4 + 3 = 15 < 16 experts of tiny: expert 15 unowned
    ("dwdp:\n  dwdp_size: 4\n  num_experts_per_worker: 3\n  num_prefetch_experts: 4\n",
     "dwdp.num_prefetch_experts", ["unowned"]),
    ("dwdp:\n  dwdp_size: 4\n  num_experts_per_worker: 4\n  num_prefetch_experts: 3\n",
     "dwdp.num_experts_per_worker", ["= 13", "16 experts", "unowned"]),
    ("dwdp:\n  dwdp_size: 4\n  num_experts_per_worker: 4\n", "dwdp.num_prefetch_experts", ["both"]),
    ("dwdp:\n  dwdp_size: 4\n  num_experts_per_worker: 4\n  num_prefetch_experts: 4\n  redundant_experts: 1\n",
     "dwdp.redundant_experts", ["derived placement"]),
    ("dwdp:\n  weight_dtype: fp8\n", "dwdp.weight_dtype", ["fp8", "run.device: cuda"]),
    ("dwdp:\n  transport: ipc\n", "dwdp.transport", ["ipc needs run.device: cuda"]),
    ("dwdp:\n  transport: vmm_fd\n", "dwdp.transport", ["run.device: cuda"]),
    ("dwdp:\n  transport: shm\nrun:\n  device: cuda\n", "dwdp.transport", ["shm is the CPU transport"]),
    ("workload:\n  isl_ratio: 0\n", "workload.isl_ratio", ["(0, 1]"]),
    ("workload:\n  imbalance_cv: 1.5\n", "workload.imbalance_cv", ["[0, 1)"]),
    ("run:\n  modes: []\n", "run.modes", ["at least one"]),
    ("run:\n  timeout_s: -1\n", "run.timeout_s", ["(0, 604800]"]),
    ("dwdp:\n  redundant_experts: []\n", "dwdp.redundant_experts", ["empty list"]),
])
def test_errors_name_file_and_key(tmp_path, text, key, fragments):
    expect_error(write(tmp_path, text), key, *fragments)


def test_dwdp_size_larger_than_expert_count(tmp_path):
    p = write(tmp_path, "model:\n  preset: tiny-gqa\ndwdp:\n  dwdp_size: 16\nrun:\n  ranks: 16\n")
    expect_error(p, "dwdp.dwdp_size", "12 experts")


@pytest.mark.parametrize("text, expected", [
    (None, "file not found"),
    ("", "file is empty"),
    ("# only a comment\n", "file is empty"),
    ("- a\n- b\n", "expected a mapping at the top level, got list"),
    ("42\n", "got int"),
    ("dwdp: {dwdp_size: [1, 2\n", "not valid YAML"),
    ("a: b: c\n", "not valid YAML"),
])
def test_file_level_errors(tmp_path, text, expected):
    p = tmp_path / "cfg.yaml"
    if text is not None:
        p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_yaml(p)
    assert str(ei.value).startswith(f"{p}: <root>: ") and expected in str(ei.value), str(ei.value)


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(ConfigError, match="not a regular file"):
        load_yaml(tmp_path)


def test_binary_file_is_a_config_error(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_bytes(bytes([0xff, 0xfe, 0x00, 0x80]) * 8)
    with pytest.raises(ConfigError) as ei:
        load_yaml(p)
    assert str(ei.value).startswith(f"{p}: <root>: not UTF-8 text (byte 0)")


def test_load_dwdp_config_sections(tmp_path):
    for text in ("dwdp_config:\n  dwdp_size: 4\n", "dwdp:\n  dwdp_size: 4\n", "dwdp_size: 4\n"):
        assert load_dwdp_config(write(tmp_path, text, "d.yaml")).dwdp_size == 4
    p = write(tmp_path, "dwdp_config:\n  dwdp_size: 4\n  bogus: 1\n", "d.yaml")
    with pytest.raises(ConfigError) as ei:
        load_dwdp_config(p)
    assert str(ei.value).startswith(f"{p}: dwdp_config.bogus: unknown key")


def test_valid_file_round_trips(tmp_path):
    p = write(tmp_path, "model:\n  preset: deepseek-r1\n  num_layers: 5\ndwdp:\n  dwdp_size: 4\n  weight_dtype: fp8\n"
                        "  transport: vmm_fd\nrun:\n  device: cuda\n  ranks: 8\n  modes: [dwdp]\n")
    (cfg,) = load_bench(p)
    assert cfg.model.spec().num_layers == 5 and cfg.dwdp.dwdp_size == 4 and cfg.dwdp.world_size == 4
    assert cfg.run.modes == ("dwdp",) and cfg.dwdp.weight_dtype == "fp8" and cfg.dwdp.num_slots == 2


def test_upstream_ranges_that_cover_all_experts_are_accepted(tmp_path):
    # tiny has 16 experts: ranks hold [0,7), [3,10), [6,13), [9,16)
    p = write(tmp_path, "dwdp:\n  dwdp_size: 4\n  num_experts_per_worker: 7\n  num_prefetch_experts: 3\n")
    (cfg,) = load_bench(p)
    assert cfg.dwdp.upstream_placement


# ---- sweeps ----------------------------------------------------------------------------------

def test_sweep_is_a_cross_product(tmp_path):
    p = write(tmp_path, "dwdp:\n  dwdp_size: [1, 2, 4]\n  slice_bytes: [262144, 2097152]\nworkload:\n  isl: [128, 256]\n"
                        "run:\n  ranks: 4\n")
    keys, points = load_bench_points(load_yaml(p), file=str(p))
    assert keys == ["dwdp.dwdp_size", "dwdp.slice_bytes", "workload.isl"]
    got = {(c.dwdp.dwdp_size, c.dwdp.slice_bytes, c.workload.isl) for c in points}
    assert len(points) == 12 and got == {(g, s, i) for g in (1, 2, 4) for s in (262144, 2097152) for i in (128, 256)}


def test_list_typed_key_sweeps_only_with_list_of_lists(tmp_path):
    keys, points = load_bench_points({"run": {"modes": ["dep", "dwdp"]}})
    assert keys == [] and [c.run.modes for c in points] == [("dep", "dwdp")]
    keys, points = load_bench_points({"run": {"modes": [["dep"], ["dwdp", "reference"]]}})
    assert keys == ["run.modes"] and [c.run.modes for c in points] == [("dep",), ("dwdp", "reference")]


def test_sweep_point_errors_name_the_key(tmp_path):
    p = write(tmp_path, "dwdp:\n  slice_bytes: [2097152, 1000]\n")
    expect_error(p, "dwdp.slice_bytes", "1000")


# ---- --set overrides -------------------------------------------------------------------------

def test_parse_and_apply_override():
    data = {"dwdp": {"dwdp_size": 2}}
    path, value = parse_override("dwdp.dwdp_size=4")
    assert (path, value) == (["dwdp", "dwdp_size"], 4)
    apply_override(data, path, value)
    apply_override(data, *parse_override("workload.isl=[128, 256]"))
    apply_override(data, *parse_override("run.modes=[[dwdp]]"))
    apply_override(data, *parse_override("model.preset=deepseek-r1"))
    assert data == {"dwdp": {"dwdp_size": 4}, "workload": {"isl": [128, 256]}, "run": {"modes": [["dwdp"]]},
                    "model": {"preset": "deepseek-r1"}}
    assert parse_override("dwdp.contention_opt=false")[1] is False
    assert parse_override("model.checkpoint=null")[1] is None
    assert parse_override("model.checkpoint=[unclosed")[1] == "[unclosed"  # not YAML -> kept as text


@pytest.mark.parametrize("text, fragment", [("dwdp.dwdp_size", "expected KEY=VALUE"), ("=4", "bad key"),
                                            ("dwdp..x=1", "bad key")])
def test_bad_override(text, fragment):
    with pytest.raises(ConfigError) as ei:
        parse_override(text)
    assert ei.value.key == "--set" and fragment in str(ei.value)


def test_override_into_a_scalar_is_an_error():
    with pytest.raises(ConfigError) as ei:
        apply_override({"dwdp": 3}, ["dwdp", "dwdp_size"], 4)
    assert ei.value.key == "dwdp.dwdp_size" and "not a section" in str(ei.value)


def test_override_then_validate_names_key():
    data = {"dwdp": {"dwdp_size": 2}}
    apply_override(data, *parse_override("dwdp.slice_bytes=300"))
    with pytest.raises(ConfigError) as ei:
        from_dict(BenchConfig, data, file="x.yaml")
    assert str(ei.value).startswith("x.yaml: dwdp.slice_bytes: ")


def test_dwdp_config_direct_errors_name_the_field():
    with pytest.raises(ConfigError, match="^num_prefetch_experts: stride 5 > num_experts_per_worker 4"):
        DwdpConfig(dwdp_size=2, num_experts_per_worker=4, num_prefetch_experts=5)
    with pytest.raises(ConfigError, match="^dwdp.dwdp_size: dwdp_size 4 is larger than the world of 2"):
        DwdpConfig(dwdp_size=4).validate_for(16, 2)
    with pytest.raises(ConfigError, match="^dwdp.prefetch_depth: 3 is more than the model's 2 MoE layers"):
        DwdpConfig(dwdp_size=2, prefetch_depth=3).validate_for(16, num_moe_layers=2)
    DwdpConfig(dwdp_size=2, prefetch_depth=3).validate_for(16)  # MoE layers not given: not checked


# ---- the CLI never shows a traceback for user input -------------------------------------------

def test_cli_config_errors_exit_2_without_traceback(tmp_path, capsys):
    bad = write(tmp_path, "dwdp:\n  dwdp_size: 2\n  slice_bytes: 1000\n")
    assert cli.main(["plan-placement", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: dwdp.slice_bytes: expected a positive multiple of 256" in err and "Traceback" not in err
    missing = tmp_path / "nope.yaml"
    assert cli.main(["plan-placement", "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: <root>: file not found" in err and "Traceback" not in err
    assert cli.main(["plan-placement", "--config", str(write(tmp_path, "[1, 2]\n", "l.yaml"))]) == 2
    assert "expected a mapping at the top level" in capsys.readouterr().err


def test_cli_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["plan-placement", "--dwdp-size", "three"])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert "--dwdp-size" in err and "invalid int value" in err and "Traceback" not in err


# ---- docs/CONFIG.md is generated and in sync --------------------------------------------------

def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_config_docs_up_to_date():
    mod = _gen_module()
    text = mod.render()
    assert (ROOT / "docs" / "CONFIG.md").read_text() == text, "run: python3 scripts/gen_config_docs.py"
    for section in ("model", "dwdp", "workload", "run"):
        assert f"## `{section}`" in text
    for key in ("dwdp.dwdp_size", "dwdp.slice_bytes", "run.modes", "workload.max_num_tokens", "model.preset"):
        assert f"| `{key}` |" in text
    assert "| `dwdp.contention_opt` | `bool` | `true` |" in text
    assert "| `run.modes` | `list of 'dep' \\| 'dwdp' \\| 'reference'` | `[dep, dwdp]` |" in text


def test_config_docs_example_is_valid():
    example = yaml.safe_load(_gen_module().EXAMPLE)
    keys, points = load_bench_points(example, file="docs/CONFIG.md")
    assert keys == ["dwdp.redundant_experts"] and [c.dwdp.redundant_experts for c in points] == [0, 8]
