"""Which device a `dwdp bench` run was measured on, and the GPU `dwdp validate-plan` may predict it for."""
from __future__ import annotations

from ..perf.bench_work import get as _get
from ..spec.schema import ConfigError


def measured_on(run: dict) -> str:
    """'cpu', a GPU name as the run's env records it (e.g. 'NVIDIA H200'), or 'unknown'."""
    env = run.get("env") if isinstance(run.get("env"), dict) else {}
    device = env.get("device") or _get(run, "config.run.device")
    if device == "cpu":
        return "cpu"
    return str(env.get("device_name") or env.get("gpu") or "unknown")


def gpu_for(path: str, runs: list[dict], gpu: str | None, allow: bool) -> str:
    """The GPU to predict `path`'s runs for: --gpu, else the one the runs name; a run measured on another device is
    refused (ConfigError naming the file, run and devices) unless `allow`."""
    from ..perf.calibration import device_matches
    from ..perf.hardware import GPUS

    devices = [measured_on(r) for r in runs]
    known = [d for d in devices if d != "unknown"]  # a run without env names no device: nothing to check
    if gpu is None:
        found = {g for d in known for g in GPUS if device_matches(d, g)}
        if len(found) > 1 or (known and not found):
            if not allow and set(known) == {"cpu"}:
                raise ConfigError(path, "env.device", f"measured on cpu: the planner predicts GPUs ({', '.join(GPUS)}), so "
                                  "the errors would measure the gap between the machines, not the planner; validate a "
                                  "GPU run, or pass --gpu with --allow-other-device to compare anyway")
            if not allow:
                raise ConfigError(path, "env.device_name", f"measured on {', '.join(sorted(set(known)))}: no single GPU of "
                                  f"{', '.join(GPUS)} to predict for; pass --gpu (and --allow-other-device to compare a "
                                  "run with a prediction for another device)")
            return "h200"
        gpu = found.pop() if found else "h200"
    if not allow:
        for i, d in enumerate(devices):
            if d != "unknown" and not device_matches(d, gpu):
                raise ConfigError(path, f"runs[{i}].env.device_name",
                                  f"measured on {d}, but the prediction is for {gpu}: the errors would measure the gap "
                                  f"between the machines, not the planner; validate a run measured on {gpu}, pass the --gpu "
                                  "it ran on, or --allow-other-device to compare anyway")
    return gpu
