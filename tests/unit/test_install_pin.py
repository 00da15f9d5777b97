"""The torch requirement keeps a TensorRT-LLM container's torch (README, "Install into a TensorRT-LLM container").

NGC containers ship pre-release torch builds (`2.8.0a0+<hash>.nv25.6`). pip keeps an installed distribution when the
requirement's specifier contains its version with pre-releases allowed (pip's resolver,
src/pip/_internal/resolution/resolvelib/factory.py, `Factory._iter_found_candidates`: the installed candidate is
used when `specifier.contains(installed_version, prereleases=True)`); a local label (`+...`) is ignored (PEP 440).
The first test checks the specifier; the second asks pip itself, with a fake installed torch in a fresh venv.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
NGC_TORCH = "2.8.0a0+5228986c39.nv25.6"  # the container build the pin must keep


def torch_requirement() -> Requirement:
    """The project's torch requirement as pyproject.toml declares it (its [project] dependencies)."""
    deps = re.search(r"^dependencies = \[(.*?)^\]", PYPROJECT.read_text(), re.S | re.M).group(1)
    deps = re.sub(r"#.*", "", deps)  # comments (they quote requirements too)
    found = [r for r in re.findall(r'"([^"]+)"', deps) if Requirement(r).name == "torch"]
    assert len(found) == 1, found
    return Requirement(found[0])


@pytest.mark.parametrize("version,kept", [
    (NGC_TORCH, True), ("2.9.0a0+50eac811a6.nv25.10", True),  # NGC builds (TensorRT-LLM containers)
    ("2.13.0", True), ("2.13.0+cpu", True), ("2.8.0", True),   # CI's pin and releases
    ("2.7.1", False), ("2.7.0a0+7c8ec84dab.nv25.3", False),   # too old: no torch._grouped_mm
])
def test_torch_pin_accepts_ngc_builds_and_releases_from_2_8(version, kept):
    assert torch_requirement().specifier.contains(version, prereleases=True) is kept


def _fake_wheel(folder: Path, version: str) -> None:
    """A torch wheel of that version with nothing in it: what pip would install in place of the container's."""
    name = f"torch-{version}.dist-info"
    with zipfile.ZipFile(folder / f"torch-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        z.writestr(f"{name}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{name}/RECORD", "")


def _pip_dry_run(venv_python: Path, links: Path, requirement: str) -> str:
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PIP_FIND_LINKS", None)
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--dry-run",
                          "--no-index", "--find-links", str(links), requirement],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.slow  # a venv and two pip resolutions in subprocesses: ~5 s on a loaded 2-core machine
def test_pip_keeps_the_containers_torch(tmp_path):
    """A venv holding only a fake `torch 2.8.0a0+...nv25.6` and an index offering torch 2.8.0: with the project's
    requirement pip reports it satisfied and installs nothing; with the former `torch>=2.8` it would install 2.8.0
    over it (the behaviour the pin exists to avoid)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=300).stdout.strip())
    info = site / f"torch-{NGC_TORCH}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {NGC_TORCH}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    links = tmp_path / "links"
    links.mkdir()
    _fake_wheel(links, "2.8.0")

    kept = _pip_dry_run(py, links, str(torch_requirement()))
    assert f"Requirement already satisfied: {torch_requirement()}" in kept and f"({NGC_TORCH})" in kept, kept
    assert "Would install" not in kept, kept
    replaced = _pip_dry_run(py, links, "torch>=2.8")
    assert "Would install torch-2.8.0" in replaced, replaced
