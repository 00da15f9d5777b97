#!/usr/bin/env python3
"""Serving benchmark of a deployed TensorRT-LLM server (aggregated or disaggregated) with DWDP or DEP.

Runs TensorRT-LLM's own client for each concurrency of a sweep:
    python -m tensorrt_llm.serve.scripts.benchmark_serving --backend openai --model M --host H --port P
        --dataset-name random --random-ids --random-input-len 8192 --random-output-len 1024
        --random-range-ratio R --num-prompts C*rounds --max-concurrency C --ignore-eos
        --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99
        --save-result --result-dir DIR --result-filename cC.json
and derives, per point:  TPS/GPU  = output_throughput / (ctx GPUs + gen GPUs)   (aggregated: gpus)
                         TPS/user = 1000 / mean_tpot_ms
                         TTFT mean/median/p90/p99 (ms)
Writes results.json, results.csv and tps_gpu_vs_tps_user.png in --out.

Config (YAML): name, model, host, port, deployment: {kind: aggregated, gpus: N} or
{kind: disaggregated, ctx_gpus: N, gen_gpus: M}, isl, osl, range_ratio, concurrency: [..], rounds.
`--parse-only DIR` re-derives the tables from saved result files without running anything.

Result-JSON fields used (benchmark_serving.py `result` dict, read at commit 0228a712 of
tensorrt_llm/serve/scripts/benchmark_serving.py): VERIFIED there: completed, duration,
total_input_tokens, total_output_tokens, request_throughput, output_throughput, mean_ttft_ms,
median_ttft_ms, mean_tpot_ms, median_tpot_ms, p{N}_ttft_ms (from --metric-percentiles, "p99" style
names). ASSUMED (written by main() around the result, not read): max_concurrency.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import yaml

REQUIRED = ("completed", "output_throughput", "mean_tpot_ms", "mean_ttft_ms", "median_ttft_ms")


def total_gpus(deployment: dict) -> int:
    kind = deployment.get("kind")
    if kind == "aggregated":
        n = int(deployment["gpus"])
    elif kind == "disaggregated":
        n = int(deployment["ctx_gpus"]) + int(deployment["gen_gpus"])
    else:
        raise ValueError(f"deployment.kind: expected aggregated or disaggregated, got {kind!r}")
    if n < 1:
        raise ValueError(f"deployment: GPU count must be >= 1, got {n}")
    return n


def parse_result(raw: dict, gpus: int, concurrency: int | None = None) -> dict:
    """One sweep point from a benchmark_serving result dict."""
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise ValueError(f"benchmark_serving result lacks {missing} (was --save-result used with "
                         "--percentile-metrics ttft,tpot?)")
    if raw["completed"] <= 0:
        raise ValueError("benchmark_serving result has completed == 0: every request failed")
    tpot = float(raw["mean_tpot_ms"])
    row = {"concurrency": concurrency if concurrency is not None else raw.get("max_concurrency"),
           "completed": int(raw["completed"]), "output_tok_s": float(raw["output_throughput"]),
           "tps_per_gpu": float(raw["output_throughput"]) / gpus,
           "tps_per_user": 1000.0 / tpot if tpot > 0 else float("nan"),
           "mean_tpot_ms": tpot, "ttft_mean_ms": float(raw["mean_ttft_ms"]), "ttft_median_ms": float(raw["median_ttft_ms"])}
    for key, value in raw.items():
        if key.startswith("p") and key.endswith("_ttft_ms") and key[1:-8].replace(".", "").isdigit():
            row[f"ttft_{key[:-8]}_ms"] = float(value)
    return row


def command(cfg: dict, concurrency: int, out_dir: Path) -> list[str]:
    return [sys.executable, "-m", "tensorrt_llm.serve.scripts.benchmark_serving", "--backend", "openai",
            "--model", str(cfg["model"]), "--host", str(cfg.get("host", "localhost")), "--port", str(cfg.get("port", 8000)),
            "--dataset-name", "random", "--random-ids", "--random-input-len", str(cfg.get("isl", 8192)),
            "--random-output-len", str(cfg.get("osl", 1024)), "--random-range-ratio", str(cfg.get("range_ratio", 0.8)),
            "--num-prompts", str(concurrency * int(cfg.get("rounds", 4))), "--max-concurrency", str(concurrency),
            "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", str(out_dir), "--result-filename", f"c{concurrency}.json"]


def write_outputs(rows: list[dict], cfg: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"name": cfg.get("name"), "deployment": cfg.get("deployment"),
                                                  "isl": cfg.get("isl"), "osl": cfg.get("osl"), "points": rows}, indent=2))
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "concurrency", k))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = sorted(rows, key=lambda r: r["tps_per_user"])
    ax.plot([r["tps_per_user"] for r in pts], [r["tps_per_gpu"] for r in pts], "o-", label=cfg.get("name", "run"))
    for r in pts:
        ax.annotate(f"c{r['concurrency']}", (r["tps_per_user"], r["tps_per_gpu"]), fontsize=7)
    ax.set_xlabel("TPS/user (1000 / mean TPOT ms)")
    ax.set_ylabel("TPS/GPU (output tok/s per GPU)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tps_gpu_vs_tps_user.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parse-only", action="store_true", help="derive tables from existing --out/raw/c*.json")
    ap.add_argument("--timeout-s", type=float, default=3600, help="limit of one benchmark_serving run")
    a = ap.parse_args(argv)
    cfg = yaml.safe_load(a.config.read_text())
    gpus = total_gpus(cfg["deployment"])
    raw_dir = a.out / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for c in cfg.get("concurrency", [1, 4, 16, 64]):
        path = raw_dir / f"c{c}.json"
        if not a.parse_only:
            subprocess.run(command(cfg, int(c), raw_dir), check=True, timeout=a.timeout_s)
        rows.append(parse_result(json.loads(path.read_text()), gpus, int(c)))
    write_outputs(rows, cfg, a.out)
    for r in rows:
        print(f"c={r['concurrency']:>4}  TPS/GPU {r['tps_per_gpu']:8.1f}  TPS/user {r['tps_per_user']:6.1f}  "
              f"TTFT median {r['ttft_median_ms']:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
