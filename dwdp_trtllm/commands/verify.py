"""`dwdp verify CONFIG.yaml`: DEP and DWDP leave the model's outputs unchanged (against the reference mode).

Runs reference, DEP and DWDP on the config's model (model.checkpoint or seeded weights) with the same
requests and tokens (one spawn of run.ranks ranks for all three modes), then prints for DEP and DWDP the
max abs / max rel error of every request's final hidden states against the reference, plus logits error
and top-1 agreement when the checkpoint has an lm_head (or ties it to the embedding). Exit 1 when a
mode is over the tolerance, 2 on a config error.

DWDP must fetch: without a dwdp.dwdp_size in the file or --set, verify uses dwdp_size 2 (the engine's default is 1,
where every rank holds every expert and DWDP copies nothing); a configuration in which no rank fetches an expert
(dwdp_size 1, one rank, or redundancy that makes every expert local) is refused (exit 2) before any rank starts.
The first line names the experts each rank fetches per MoE layer, the second the gemm DWDP runs and whether it is
the path a TensorRT-LLM deployment without gemm takes first (moe_evidence.default_gemm), with the --set that
verifies that one (gemm_line).

Errors of one request over its [isl, H] (or [isl, V]) tensor: max abs = max|x - x_ref|, rel = ||x - x_ref|| /
||x_ref|| (Frobenius, as tests/unit/test_engine_equivalence.py: one token routed to another expert by a bf16
tie moves it, without one element deciding); the table shows the maximum over requests.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

#: default tolerance on the max relative error of the final hidden states, by model.dtype
DEFAULT_TOL = {"float32": 1e-4, "bf16": 5e-2}
MODES = ("reference", "dep", "dwdp")
#: the largest --tol: a norm-wise relative error of 1 is an output with no digit right, so a tolerance past it (inf
#: included) makes a verification that cannot fail
MAX_TOL = 1.0
#: dwdp_size verify uses when neither the file nor --set gives one (capped at run.ranks)
DEFAULT_DWDP_SIZE = 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "verify", help="check that DEP and DWDP reproduce the reference outputs (hidden states, logits, top-1)",
        description="Run reference, DEP and DWDP on the config's model with the same tokens and print max abs / rel "
                    "error of final hidden states (and logits + top-1 agreement when the checkpoint has an lm_head). "
                    "Exit 1 over the tolerance.")
    p.add_argument("config", type=Path, help="bench-style YAML (model, dwdp, workload, run sections; no sweeps)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="override run.device")
    p.add_argument("--ranks", type=int, default=None, help="override run.ranks")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key (repeatable; VALUE is YAML)")
    p.add_argument("--tol", type=float, default=None,
                   help=f"max relative error allowed on hidden states, in (0, {MAX_TOL:g}] (default by model.dtype: "
                        f"{DEFAULT_TOL})")
    return p


def _rel(x, ref) -> tuple[float, float]:
    """(max abs error, norm-wise relative error) of x against ref."""
    d = x - ref
    return d.abs().max().item(), d.norm().item() / max(ref.norm().item(), 1e-30)


def _lm_head(cfg):
    """lm_head_VH of the config's checkpoint, or None (seeded weights, or a checkpoint without one)."""
    if not cfg.model.checkpoint:
        return None
    import json

    from ..engine.loader import load_lm_head

    cfg_json = Path(cfg.model.checkpoint) / "config.json"
    tied = cfg_json.exists() and bool(json.loads(cfg_json.read_text()).get("tie_word_embeddings", False))
    return load_lm_head(cfg.model.checkpoint, cfg.model.spec(), tied=tied)


def compare(outputs: dict, lm_head_VH=None) -> dict[str, dict[str, float]]:
    """{mode: {hidden_abs, hidden_rel[, logits_abs, logits_rel, top1]}} of dep/dwdp against reference.

    outputs: run_modes(..., collect_outputs=True); hidden states are CPU float32 [isl, H] per request."""
    ref = {rid: h for res in outputs["reference"] for rid, h in res.extra["hidden"].items()}
    rows = {}
    for mode in (m for m in MODES if m != "reference" and m in outputs):
        got = {rid: h for res in outputs[mode] for rid, h in res.extra["hidden"].items()}
        if sorted(got) != sorted(ref):
            raise RuntimeError(f"{mode}: requests {sorted(set(ref) ^ set(got))} missing from one of the modes")
        row = {"hidden_abs": 0.0, "hidden_rel": 0.0}
        same = total = 0
        for rid, h_ref in ref.items():
            a, r = _rel(got[rid], h_ref)
            row["hidden_abs"], row["hidden_rel"] = max(row["hidden_abs"], a), max(row["hidden_rel"], r)
            if lm_head_VH is not None:
                lg, lg_ref = got[rid] @ lm_head_VH.T, h_ref @ lm_head_VH.T
                a, r = _rel(lg, lg_ref)
                row["logits_abs"], row["logits_rel"] = max(row.get("logits_abs", 0.0), a), max(row.get("logits_rel", 0.0), r)
                same += int((lg.argmax(-1) == lg_ref.argmax(-1)).sum())
                total += lg.shape[0]
        if total:
            row["top1"] = same / total
        rows[mode] = row
    return rows


class ModeProgress:
    """run_modes' progress callback for a plain-text log: one line when a mode has finished every request of every
    rank (requests and seconds since the previous line), so a verify that runs for minutes says where it is, in a
    terminal and in a pipe alike."""

    def __init__(self, queues: list[list], out: Callable[[str], None] = print, clock=time.monotonic):
        self.total = sum(len(q) for q in queues)
        self.out, self.clock = out, clock
        self.done: dict[str, dict[int, int]] = {}
        self.t_last = clock()

    def __call__(self, rank: int, mode: str, n_done: int, _total: int) -> None:
        per_rank = self.done.setdefault(mode, {})
        finished_before = sum(per_rank.values()) >= self.total
        per_rank[rank] = n_done
        if not finished_before and sum(per_rank.values()) >= self.total:
            now = self.clock()
            step = MODES.index(mode) + 1 if mode in MODES else "?"
            first = len(self.done) == 1
            self.out(f"dwdp verify: {mode} done ({step}/{len(MODES)}): {self.total} requests in "
                     f"{now - self.t_last:.1f} s" + (" (the ranks' start-up included)" if first else ""))
            self.t_last = now


def run_verify(cfg, tol: float | None = None, out: Callable[[str], None] = print) -> tuple[dict, float, bool]:
    """(compare() rows, tolerance used, all within tolerance) for one BenchConfig; progress lines through `out`."""
    from ..spec.workload import generate_requests
    from ..engine.launcher import run_modes

    tol = DEFAULT_TOL[cfg.model.dtype] if tol is None else tol
    queues = generate_requests(cfg.workload, cfg.run.ranks)
    out(f"dwdp verify: starting {cfg.run.ranks} rank processes; {', '.join(MODES)} run in turn on the same "
        f"{sum(len(q) for q in queues)} requests")
    outputs = run_modes(cfg, list(MODES), queues, collect_outputs=True, progress=ModeProgress(queues, out))
    rows = compare(outputs, _lm_head(cfg))
    return rows, tol, all(r["hidden_rel"] <= tol for r in rows.values())


def format_rows(rows: dict, tol: float) -> str:
    head = f"{'mode':<6} {'hidden max abs':>15} {'hidden max rel':>15} {'logits max abs':>15} {'logits max rel':>15} {'top-1':>7}  verdict"
    lines = [head]
    for mode, r in rows.items():
        lg = (f"{r['logits_abs']:>15.3e} {r['logits_rel']:>15.3e} {r['top1']:>7.2%}" if "top1" in r
              else f"{'-':>15} {'-':>15} {'-':>7}")
        ok = "ok" if r["hidden_rel"] <= tol else f"OVER tolerance {tol:g}"
        lines.append(f"{mode:<6} {r['hidden_abs']:>15.3e} {r['hidden_rel']:>15.3e} {lg}  {ok}")
    return "\n".join(lines)


def _dwdp_size_given(data: dict, overrides: list[str], key: str = "dwdp_size") -> bool:
    """Whether the file's dwdp: section (a bench config has no other: config.BenchConfig) or a --set names `key`.
    data: the file's mapping, as load_point read it."""
    in_file = isinstance(data.get("dwdp"), dict) and key in data["dwdp"]
    return in_file or any(o.split("=", 1)[0].strip().endswith(f".{key}") for o in overrides)


def gemm_line(cfg_gemm: str, given: bool, weight_dtype: str, device: str, sm: int | None) -> str:
    """What verify's second line says of the gemm DWDP runs: the config's (given: the file or --set names dwdp.gemm;
    else DwdpConfig's default, merge, the bench engine's and no deployment's), and whether it is the path a
    TensorRT-LLM deployment without gemm takes first (moe_evidence.default_gemm: for this GPU's sm on CUDA, the rule
    across GPUs on cpu), with the --set that verifies that path. verify does not switch to it by itself: the
    embedded engine has no fallback chain (a composite view its sizes cannot map fails the run, where the adapter
    would fall back), so a silent default could turn a passing verify into a failing one."""
    from ..integration.moe_evidence import default_gemm, default_gemm_where
    whose = "the config's" if given else "DwdpConfig's default"
    if device == "cuda" and sm is not None:
        g = default_gemm(weight_dtype, sm)
        if g == cfg_gemm:
            return f"gemm {cfg_gemm} ({whose}; the path a deployment without gemm takes first on this GPU, sm_{sm})"
        return (f"gemm {cfg_gemm} ({whose}; NOT the deployed path: a deployment without gemm takes {g} first on this "
                f"GPU, sm_{sm}, moe_evidence.default_gemm: verify it with --set dwdp.gemm={g})")
    return (f"gemm {cfg_gemm} ({whose}; a deployment without gemm takes moe_evidence.default_gemm's path, for "
            f"{weight_dtype} {default_gemm_where(weight_dtype)}: verify it on that GPU with --device cuda "
            "--set dwdp.gemm=<path>)")


def load_point(args: argparse.Namespace):
    """The one BenchConfig verify runs: dwdp_size defaulted to DEFAULT_DWDP_SIZE (capped at run.ranks) when not
    given; refused (ConfigError) when DWDP would fetch nothing. The file is read once and its point built once."""
    import dataclasses

    from ..bench.sweep import check_device_present, load_sweep
    from ..spec.schema import ConfigError, load_yaml

    overrides = list(args.overrides)
    data = load_yaml(args.config)  # the one read of the file: load_sweep builds the point from this mapping
    swept, points = load_sweep(args.config, overrides, device=args.device, ranks=args.ranks, data=data)
    check_device_present(points, args.config, overrides, args.device)
    if swept:
        raise ConfigError(str(args.config), swept[0], "dwdp verify runs one point: give a single value, not a list")
    cfg = points[0].config
    if not _dwdp_size_given(data, overrides):
        size = min(DEFAULT_DWDP_SIZE, cfg.run.ranks)
        try:  # the point's own checks (BenchConfig.__post_init__) run again on the defaulted size only
            cfg = dataclasses.replace(cfg, dwdp=dataclasses.replace(cfg.dwdp, dwdp_size=size))
        except ConfigError as e:
            raise ConfigError(str(args.config), e.key, f"{e.expected} (dwdp_size {size} is verify's default: set "
                                                       "dwdp.dwdp_size)") from None
    sm = None
    if cfg.run.device == "cuda":
        import torch

        from ..integration.gemm_choice import device_sm
        sm = device_sm(torch.device("cuda", torch.cuda.current_device()))
    line = gemm_line(cfg.dwdp.gemm, _dwdp_size_given(data, overrides, "gemm"), cfg.dwdp.weight_dtype, cfg.run.device, sm)
    from ..bench.preflight import fetched_per_rank, preflight
    fetched = fetched_per_rank(cfg)
    if max(fetched) == 0:
        raise ConfigError(str(args.config), "dwdp.dwdp_size",
                          f"DWDP fetches no expert here (dwdp_size {cfg.dwdp.dwdp_size}, redundant_experts "
                          f"{cfg.dwdp.redundant_experts}, run.ranks {cfg.run.ranks}: every rank holds every expert), so "
                          "verify would not test DWDP: use dwdp_size >= 2 and run.ranks >= 2 with fewer redundant experts")
    # /dev/shm and memory of the three modes it runs, before any rank starts
    preflight([cfg], file=str(args.config), modes=MODES, warmup=False)
    return cfg, fetched, line


def run(args: argparse.Namespace) -> int:
    from ..spec.schema import ConfigError

    if args.tol is not None and not 0 < args.tol <= MAX_TOL:  # nan too
        raise ConfigError(None, "--tol", f"expected a number in (0, {MAX_TOL:g}] (a relative error; more cannot fail), "
                                         f"got {args.tol}")
    cfg, fetched, line = load_point(args)
    spec = cfg.model.spec()
    src = cfg.model.checkpoint or f"seeded weights (seed {cfg.model.seed})"
    lo, hi = min(fetched), max(fetched)
    print(f"dwdp verify: {spec.name} ({spec.num_layers} layers, {spec.num_experts} experts) from {src}; "
          f"{cfg.run.ranks} ranks on {cfg.run.device}, dwdp_size {cfg.dwdp.dwdp_size} (each rank fetches "
          f"{lo if lo == hi else f'{lo}-{hi}'} of {spec.num_experts} experts per MoE layer), weights "
          f"{cfg.dwdp.weight_dtype}, dtype {cfg.model.dtype}")
    print(f"dwdp verify: DWDP runs {line}")
    rows, tol, ok = run_verify(cfg, args.tol)
    print(format_rows(rows, tol))
    print("dwdp verify: " + ("DEP and DWDP match the reference" if ok else "FAILED: a mode is over the tolerance"))
    return 0 if ok else 1
