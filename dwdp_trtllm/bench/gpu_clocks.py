"""The GPU's SM clock and power while something runs on it: sampled every 20 ms, summarised in one place.

Why: the floor's kernels timed in short bursts run at the card's boost clock, the engine's back-to-back forwards at
the clock its power limit allows (docs/history/benchmarks-2026-12.md section 12: 1980 against 1552 MHz median on the H200); engine /
floor is read beside the clocks both ran at (bench/floor.py, bench/floor_sustained.py, scripts/profile_engine.py).

Sources, in order: NVML through the `pynvml` module (package nvidia-ml-py; in the device image), polled by a thread
of this process; else `nvidia-smi --query-gpu=... -lms 20` in a child process; else none (the reason is kept in
`GpuSampler.source`). Neither creates a CUDA context. The GPU sampled is the one torch calls cuda:`index`
(CUDA_VISIBLE_DEVICES applied, host_resources.visible_gpus; torch's UUID of the device wins where given).

Samples are stamped on time.perf_counter() (CLOCK_MONOTONIC: the clock the ranks stamp their iterations on,
engine/records.py), so a window of them can be cut to the measured iterations of ranks in other processes.
`clock_stats` is the one function that turns samples into the numbers a report shows, `clock_text` its one wording.
"""
from __future__ import annotations

import bisect
import datetime
import statistics
import threading
import time

#: seconds between samples
PERIOD_S = 0.02


def gpu_index_of(cuda_index: int, uuids: list[str], visible: str | None, torch_uuid: str | None = None) -> int | None:
    """The index in `uuids` (NVML's / nvidia-smi's order) of the GPU torch calls cuda:`cuda_index`, or None where it
    cannot be told. visible: CUDA_VISIBLE_DEVICES (None when unset); torch_uuid: torch's UUID of the device (with or
    without 'GPU-'), which wins when listed; else cuda_index goes through CUDA_VISIBLE_DEVICES as
    host_resources.visible_gpus reads it (indices or UUID prefixes; MIG or ambiguous: None)."""
    if torch_uuid:
        u = torch_uuid if torch_uuid.startswith(("GPU-", "MIG-")) else f"GPU-{torch_uuid}"
        if u in uuids:
            return uuids.index(u)
    from ..deploy.host_resources import visible_gpus
    order = visible_gpus(visible, uuids)
    if order is None or not 0 <= cuda_index < len(order):
        return None
    return order[cuda_index]


def in_windows(samples, windows) -> list:
    """The (t, MHz, W) samples stamped inside one of the (t0, t1) windows (same clock: perf_counter)."""
    merged: list[list[float]] = []  # overlapping windows merged, in order
    for a, b in sorted(windows):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    starts = [a for a, _ in merged]
    out = []
    for s in samples:
        i = bisect.bisect_right(starts, s[0]) - 1
        if i >= 0 and s[0] <= merged[i][1]:
            out.append(s)
    return out


def clock_stats(samples, windows=None) -> dict:
    """{"sm_clock_mhz": {"median", "min", "max"}, "power_w": {"median", "max"}, "samples": n} of (sm MHz, W) pairs
    (or (t, MHz, W) triples); {"samples": 0} when there are none. The one place these medians are computed.
    windows: [(t0, t1)] on the samples' clock: only (t, MHz, W) samples stamped inside one count (e.g. the burst
    floor's timed calls, not its buffer fills, host work and the gaps between them); then also "windows" (how many)
    and "samples_in_block" (all samples given, inside or not)."""
    extra = {}
    if windows is not None:
        extra = {"windows": len(windows), "samples_in_block": len(samples)}
        samples = in_windows(samples, windows)
    rows = [s[-2:] for s in samples]
    if not rows:
        return {"samples": 0, **extra}
    mhz, watts = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
    return {"sm_clock_mhz": {"median": statistics.median(mhz), "min": min(mhz), "max": max(mhz)},
            "power_w": {"median": statistics.median(watts), "max": max(watts)}, "samples": len(rows), **extra}


def clock_text(stats: dict | None) -> str:
    """One line of clock_stats (with GpuSampler.stats' source where given): 'SM clock median 1552 MHz (1365-1980),
    power median 417 W (max 700 W), 40 samples (nvml)'; 'no clock samples (why)' without samples."""
    src = (stats or {}).get("source")
    inside = ""
    if stats and "windows" in stats:  # clock_stats cut to timed windows: how many samples fell inside
        inside = f" inside {stats['windows']} timed windows (of {stats['samples_in_block']} in the block)"
    if not stats or not stats.get("samples"):
        return "no clock samples" + inside + (f" ({src})" if src else "")
    c, p = stats["sm_clock_mhz"], stats["power_w"]
    return (f"SM clock median {c['median']:.0f} MHz ({c['min']:.0f}-{c['max']:.0f}), power median {p['median']:.0f} W "
            f"(max {p['max']:.0f} W), {stats['samples']} samples" + inside + (f" ({src})" if src else ""))


def _nvml_shutdown() -> None:
    """pynvml.nvmlShutdown, never raising: a sampler must never fail the run it watches."""
    try:
        import pynvml
        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - pynvml.NVMLError and friends
        pass


def _uuid_text(u) -> str:
    return u.decode(errors="replace") if isinstance(u, bytes) else str(u)


def _torch_uuid(cuda_index: int) -> str | None:
    """torch's UUID of cuda:N, only where this process already uses CUDA (asking would otherwise start CUDA here)."""
    try:
        import torch
        if torch.cuda.is_initialized():
            return str(torch.cuda.get_device_properties(cuda_index).uuid)
    except (ImportError, AttributeError, RuntimeError, AssertionError):
        pass
    return None


class GpuSampler:
    """Samples (perf_counter s, SM MHz, W) of the GPU torch calls cuda:`cuda_index` while the `with` block runs.
    `source` says where they came from ("nvml", "nvidia-smi") or why there are none; `window(t0, t1)` the samples
    stamped in [t0, t1]; `stats(t0, t1, windows)` their clock_stats with the source. Only samples stamped inside the block
    are kept, whatever the source (nvidia-smi's, stamped by it, can fall before its start or after its end)."""

    def __init__(self, cuda_index: int = 0, period_s: float = PERIOD_S):
        self.cuda_index, self.period_s = cuda_index, period_s
        self.samples: list[tuple[float, float, float]] = []
        self.source = "not started"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = None
        self._smi_epoch: tuple[datetime.datetime, float] | None = None
        #: (enter, exit) of the block on perf_counter
        self.block: tuple[float, float | None] | None = None

    # ---- the window ---------------------------------------------------------------------------------------
    def window(self, t0: float | None = None, t1: float | None = None) -> list[tuple[float, float, float]]:
        return [s for s in self.samples if (t0 is None or s[0] >= t0) and (t1 is None or s[0] <= t1)]

    def stats(self, t0: float | None = None, t1: float | None = None, windows=None) -> dict:
        """clock_stats of the samples in [t0, t1] (cut to `windows` where given), with the source."""
        return {**clock_stats(self.window(t0, t1), windows), "source": self.source}

    # ---- NVML ---------------------------------------------------------------------------------------------
    def _nvml_handle(self):
        """The NVML handle of cuda:`cuda_index`, NVML left initialised (__exit__ shuts it down); None, or an
        exception, with NVML shut down again (nvmlInit is counted: one shutdown per init)."""
        import pynvml
        pynvml.nvmlInit()
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            uuids = [_uuid_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
            from .. import env
            i = gpu_index_of(self.cuda_index, uuids, env.cuda_visible_devices(), _torch_uuid(self.cuda_index))
        except BaseException:
            _nvml_shutdown()
            raise
        if i is None:
            _nvml_shutdown()
            return None
        return handles[i]

    def _poll_nvml(self, handle) -> None:
        import pynvml
        while not self._stop.is_set():
            try:
                mhz = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
                watts = pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3  # mW
                self.samples.append((time.perf_counter(), float(mhz), float(watts)))
            except pynvml.NVMLError:
                pass
            self._stop.wait(self.period_s)

    # ---- nvidia-smi ---------------------------------------------------------------------------------------
    def _start_smi(self) -> bool:
        import shutil
        import subprocess
        if not shutil.which("nvidia-smi"):
            return False
        try:
            text = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=30, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return False
        from .. import env
        uuids = [t.strip() for t in text.splitlines() if t.strip()]
        i = gpu_index_of(self.cuda_index, uuids, env.cuda_visible_devices(), _torch_uuid(self.cuda_index))
        if i is None:
            self.source = f"no nvidia-smi GPU found for cuda:{self.cuda_index}"
            return True
        # line-buffered (stdbuf) and stopped with SIGINT, as nvidia-smi's loop expects: no sample left in a buffer
        cmd = ["nvidia-smi", "-i", uuids[i], "--query-gpu=timestamp,clocks.sm,power.draw",
               "--format=csv,noheader,nounits", "-lms", str(max(1, int(self.period_s * 1e3)))]
        self._proc = subprocess.Popen((["stdbuf", "-oL"] if shutil.which("stdbuf") else []) + cmd,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._smi_epoch = (datetime.datetime.now(), time.perf_counter())
        self.source = "nvidia-smi"
        return True

    def _stop_smi(self) -> None:
        import signal
        import subprocess
        self._proc.send_signal(signal.SIGINT)
        try:
            text, _ = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            text, _ = self._proc.communicate()
        t0, t1 = self.block
        # the NVML thread samples only inside the block; nvidia-smi's own stamps can fall outside it (its start on
        # an idle GPU, its last line after SIGINT): the same rule for both
        self.samples += [s for s in parse_smi(text, self._smi_epoch) if t0 <= s[0] <= t1]

    # ---- the block ----------------------------------------------------------------------------------------
    def __enter__(self) -> "GpuSampler":
        try:
            handle = self._nvml_handle()
        except ImportError:
            handle, self.source = None, "pynvml not importable (pip install nvidia-ml-py)"
        except Exception as e:  # noqa: BLE001 - pynvml.NVMLError and friends: no NVML here; try nvidia-smi
            handle, self.source = None, f"NVML: {type(e).__name__}"
        if handle is None and self.source == "not started":
            self.source = f"NVML: no GPU found for cuda:{self.cuda_index}"
        if handle is not None:
            self.source = "nvml"
            self._thread = threading.Thread(target=self._poll_nvml, args=(handle,), daemon=True, name="gpu-clocks")
            self._thread.start()
        elif not self._start_smi() and self.source.startswith("pynvml"):
            self.source += "; no nvidia-smi"
        self.block = (time.perf_counter(), None)
        return self

    def __exit__(self, *exc) -> bool:
        self.block = (self.block[0] if self.block else time.perf_counter(), time.perf_counter())
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            _nvml_shutdown()  # nvmlInit is counted: one shutdown per init
        if self._proc is not None:
            self._stop_smi()
        return False


def parse_smi(text: str, epoch: tuple[datetime.datetime, float] | None) -> list[tuple[float, float, float]]:
    """(perf_counter s, MHz, W) of nvidia-smi's 'timestamp, clocks.sm, power.draw' lines (nounits); its wall-clock
    stamps mapped to perf_counter through `epoch` (a (datetime.now(), perf_counter()) pair read together). Lines
    that do not parse ('[N/A]', a cut last line) are skipped."""
    if epoch is None:
        return []
    out = []
    for line in text.splitlines():
        parts = [x.strip() for x in line.split(",")]
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            out.append((epoch[1] + (when - epoch[0]).total_seconds(), float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    return out
