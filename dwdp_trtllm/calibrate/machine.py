"""What the calibration ran on: host, time, GPU, driver, torch, CUDA and the NVLink topology (`measured_on` of the
calibration file, perf/calibration_detail.py). Reads the machine; every external command is bounded.
"""
from __future__ import annotations

import datetime
import socket
import subprocess
from typing import Callable

from ..perf.calibration_detail import CALIBRATION, FUNCTIONAL

#: seconds one nvidia-smi call may take (a wedged driver must not hang the calibration)
SMI_TIMEOUT_S = 20.0


def _smi(args: list[str], run: Callable = subprocess.run) -> str:
    """nvidia-smi's stdout, or why it is not available (the file records either)."""
    try:
        r = run(["nvidia-smi", *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except FileNotFoundError:
        return "not available: nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return f"not available: nvidia-smi {' '.join(args)} took over {SMI_TIMEOUT_S:g} s"
    if r.returncode != 0:
        return f"not available: nvidia-smi {' '.join(args)} exited {r.returncode}: {(r.stderr or '').strip()[:200]}"
    return r.stdout.strip()


def now_utc() -> str:
    """The run's timestamp (UTC, seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_machine(device: str, gpus: int, *, run: Callable = subprocess.run, at: str | None = None) -> dict:
    """`measured_on` for a run on `gpus` devices of type `device` (cuda: GPU name from torch, driver and topology
    from nvidia-smi; cpu: a functional check, labelled so)."""
    import torch

    info = {"host": socket.gethostname() or "unknown", "at": at or now_utc(), "device": device,
            "purpose": CALIBRATION if device == "cuda" else FUNCTIONAL, "gpu_count": gpus,
            "torch": torch.__version__, "cuda": torch.version.cuda or "none (CPU build of torch)"}
    if device != "cuda":
        info.update(gpu_name="none (CPU)", driver="none (CPU)", topology="none (CPU)")
        return info
    info["gpu_name"] = torch.cuda.get_device_name(0)
    driver = _smi(["--query-gpu=driver_version", "--format=csv,noheader"], run)
    info["driver"] = driver.splitlines()[0].strip() if driver and not driver.startswith("not available") else driver
    info["topology"] = _smi(["topo", "-m"], run) if gpus > 1 else "one GPU: no peer links used"
    return info
