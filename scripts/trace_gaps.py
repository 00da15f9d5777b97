"""Where the GPU idles inside one profiled forward: gaps between kernels in a torch.profiler chrome trace.

    python3 scripts/trace_gaps.py TRACE.json [--top 15]

Reads the trace torch.profiler's export_chrome_trace writes (scripts/profile_engine.py writes one with the
engine's phases marked as `phase:<name>:<layer>` record_function ranges and Python stacks on). For every GPU
activity (kernel, memcpy, memset) it takes the idle time since the previous activity ended (the gap before it),
and through the correlation id the host call that launched it:
- host late: the launch happened after the GPU had gone idle: the host was behind (Python, launch overhead, a host
  sync before it, an allocation);
- GPU side: the launch was queued in time but the activity started later (launch latency, stream dependencies).
Each gap is charged to the phase whose range holds its launch, with the innermost dwdp_trtllm Python frame around
the launch (what the host was doing). Pure: no torch, no GPU (tests/unit/test_engine_trace_gaps.py).
"""
from __future__ import annotations

import argparse
import bisect
import json
from pathlib import Path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def _x(events: list[dict], cats: tuple[str, ...]) -> list[dict]:
    return sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in cats), key=lambda e: e["ts"])


def _containing(spans: list[dict], starts: list[float], ts: float) -> dict | None:
    """The last-starting span of `spans` (sorted by start) that holds ts."""
    i = bisect.bisect_right(starts, ts) - 1
    while i >= 0:
        s = spans[i]
        if s["ts"] <= ts <= s["ts"] + s.get("dur", 0):
            return s
        i -= 1
        if i >= 0 and ts - spans[i]["ts"] > 5e6:  # 5 s: nothing this long in one forward
            break
    return None


def _stack(frames: list[dict], starts: list[float], ts: float, depth: int = 3) -> str | None:
    """The `depth` innermost frames of `frames` (sorted by start) that hold ts, innermost first, joined by " < "."""
    held = []
    for i in range(bisect.bisect_right(starts, ts) - 1, -1, -1):
        f = frames[i]
        if f["ts"] + f.get("dur", 0) >= ts:
            held.append(str(f["name"]).split("dwdp_trtllm/")[-1])
            if len(held) == depth:
                break
    return " < ".join(held) or None


def gap_report(trace: dict, *, top: int = 15, min_gap_us: float = 5.0) -> dict:
    """{"span_ms", "busy_ms", "idle_ms", "host_late_ms", "gpu_side_ms", "per_phase": {phase: {"busy_ms",
    "idle_ms", "host_late_ms"}}, "gaps": [the `top` largest: {"us", "phase", "host_late", "next", "prev", "launch",
    "frame"}]}. Gaps under min_gap_us count in the sums, not in the list."""
    ev = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    gpu = _x(ev, GPU_CATS)
    launches = {e.get("args", {}).get("correlation"): e for e in _x(ev, LAUNCH_CATS)}
    marks = [e for e in _x(ev, ("user_annotation",)) if str(e.get("name", "")).startswith("phase:")]
    mark_ts = [e["ts"] for e in marks]
    frames = [e for e in _x(ev, ("python_function",)) if "dwdp_trtllm" in str(e.get("name", ""))]
    frame_ts = [e["ts"] for e in frames]
    out = {"span_ms": 0.0, "busy_ms": 0.0, "idle_ms": 0.0, "host_late_ms": 0.0, "gpu_side_ms": 0.0,
           "per_phase": {}, "gaps": []}
    if not gpu:
        return out
    end = gpu[0]["ts"]
    gaps = []
    prev = None
    for g in gpu:
        corr = g.get("args", {}).get("correlation")
        launch = launches.get(corr)
        mark = _containing(marks, mark_ts, launch["ts"]) if launch else None
        phase = mark["name"].split(":")[1] if mark else "(none)"
        pp = out["per_phase"].setdefault(phase, {"busy_ms": 0.0, "idle_ms": 0.0, "host_late_ms": 0.0})
        pp["busy_ms"] += g.get("dur", 0) / 1e3
        out["busy_ms"] += g.get("dur", 0) / 1e3
        gap = g["ts"] - end
        if gap > 0:
            late = launch is not None and launch["ts"] > end
            pp["idle_ms"] += gap / 1e3
            out["idle_ms"] += gap / 1e3
            if late:
                pp["host_late_ms"] += gap / 1e3
                out["host_late_ms"] += gap / 1e3
            else:
                out["gpu_side_ms"] += gap / 1e3
            if gap >= min_gap_us:
                gaps.append((gap, g, launch, phase, late, prev))
        end = max(end, g["ts"] + g.get("dur", 0))
        prev = g
    out["span_ms"] = (end - gpu[0]["ts"]) / 1e3
    gaps.sort(key=lambda x: -x[0])
    for gap, g, launch, phase, late, before in gaps[:top]:
        out["gaps"].append({"us": round(gap, 1), "phase": phase, "host_late": late, "next": str(g.get("name", ""))[:80],
                            "prev": str(before.get("name", ""))[:60] if before else None,
                            "launch": launch.get("name") if launch else None,
                            "frame": _stack(frames, frame_ts, launch["ts"]) if launch else None})
    return out


def format_report(rep: dict, tag: str = "") -> str:
    p = f"[{tag}] " if tag else ""
    lines = [f"{p}GPU in the profiled forward: span {rep['span_ms']:.1f} ms, busy {rep['busy_ms']:.1f} ms, idle "
             f"{rep['idle_ms']:.1f} ms (host late {rep['host_late_ms']:.1f}, GPU side {rep['gpu_side_ms']:.1f}; "
             f"profiler on: host costs inflated)"]
    for ph, d in sorted(rep["per_phase"].items()):
        lines.append(f"{p}  phase {ph}: kernels {d['busy_ms']:.1f} ms, idle before them {d['idle_ms']:.2f} ms "
                     f"(host late {d['host_late_ms']:.2f})")
    for g in rep["gaps"]:
        lines.append(f"{p}  gap {g['us']:8.1f} us in {g['phase']} ({'host late' if g['host_late'] else 'GPU side'}) "
                     f"after {g['prev']} before {g['next']} | {g['launch']} from {g['frame']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    print(format_report(gap_report(json.loads(Path(args.trace).read_text()), top=args.top)))


if __name__ == "__main__":
    main()
