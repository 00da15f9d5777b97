"""The decision-code mutations a reviewer named, applied by hand (docs/ARCHITECTURE.md "Testing"): each edit is made
in a copy of the checkout and the tests that pin it are run there; every one must fail them ("killed").

mutmut's own operators (numbers, comparisons, arguments, strings) do not write some of these (a max over ranks
priced as the mean, a GB/s read as 1e8 bytes/s, a branch dropped): this list keeps them checked by name.

    python scripts/mutation_classes.py          # one line per mutation: KILLED or SURVIVED; exit 1 if any survived
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_module import _copy_checkout  # noqa: E402

U = "tests/unit/"
#: (what, file, original text, mutated text, the test files that must fail)
PV, PP = U + "test_pinned_values.py", U + "test_pinned_planner.py"
CASES = [
    ("DEP lock-step priced as the mean over ranks (planner.iteration_times)", "dwdp_trtllm/perf/planner.py",
     "dep_S = np.max(np.where(busy, dense_SR + n * a.own_SR, 0.0), -1)",
     "dep_S = np.mean(np.where(busy, dense_SR + n * a.own_SR, 0.0), -1)", [PV, PP]),
    ("DEP lock-step priced as the mean over ranks (imbalance.compare: predict)", "dwdp_trtllm/perf/imbalance.py",
     "t_dep_S = own.max(-1) +", "t_dep_S = own.mean(-1) +", [PV, PP]),
    ("measured all-to-all GB/s read as 1e8 bytes/s (cost_model)", "dwdp_trtllm/perf/cost_model.py",
     "return c * 1e9 if c else self.gpu.a2a_bytes_per_s_for(group)",
     "return c * 1e8 if c else self.gpu.a2a_bytes_per_s_for(group)", [PV, U + "test_pinned_cost_model.py", PP]),
    ("measured all-to-all GB/s read as 1e8 bytes/s (dep_variants)", "dwdp_trtllm/perf/dep_variants.py",
     "gbps * 1e9 if gbps else None", "gbps * 1e8 if gbps else None", [PV, U + "test_pinned_dep_variants.py"]),
    ("measured peer-copy GB/s read as 1e8 bytes/s (cost_model)", "dwdp_trtllm/perf/cost_model.py",
     "return c * 1e9 if c else self.gpu.peer_bytes_per_s_for(group)",
     "return c * 1e8 if c else self.gpu.peer_bytes_per_s_for(group)", [PV, U + "test_pinned_cost_model.py"]),
    ("KV transfer GB/s read as 1e8 bytes/s (search)", "dwdp_trtllm/sizing/search.py",
     "(self.kv_gbps * 1e9)", "(self.kv_gbps * 1e8)", [U + "test_pinned_size_search.py"]),
    ("goodput ignoring the TTFT SLO (metrics.summarize)", "dwdp_trtllm/sizing/metrics.py",
     "good &= ttft <= slo.ttft_p99_s", "pass", [PV, U + "test_pinned_sizing_metrics.py"]),
    ("binding constraint: context side only above half the GPUs", "dwdp_trtllm/sizing/search.py",
     "if ctx_share >= 0.5:", "if ctx_share > 0.5:", [U + "test_pinned_size_search.py"]),
    ("binding constraint: prefetch at half the iterations", "dwdp_trtllm/sizing/search.py",
     "cost.prefetch_bound / cost.iterations > 0.5", "cost.prefetch_bound / cost.iterations >= 0.5",
     [U + "test_pinned_size_search.py"]),
    ("binding constraint: KV transfer at the whole decode time", "dwdp_trtllm/sizing/search.py",
     "kv_mean > 0.1 * m.tpot_s", "kv_mean > 1.0 * m.tpot_s", [U + "test_pinned_size_search.py"]),
    ("decode step priced at the first token's KV (simulator)", "dwdp_trtllm/sizing/simulator.py",
     "kv0 + steps / 2)", "kv0)", [PV]),
    ("decode attention flat past the longest KV row (decode_cost)", "dwdp_trtllm/sizing/decode_cost.py",
     "(2 ** (xk_raw - lk[-1]) if xk_raw > lk[-1] else 1.0)", "1.0", [PV, U + "test_pinned_decode_cost.py"]),
    ("calibrated group pull without the slice size's own rate (peer.group_pull)", "dwdp_trtllm/calibrate/peer.py",
     "(slice_gbps.get(s, pair_gbps) if s else pair_gbps)", "pair_gbps", [PV, U + "test_pinned_calibrate_peer.py"]),
    ("prefetch without the calibrated slice efficiency (cost_model)", "dwdp_trtllm/perf/cost_model.py",
     "eff = (p.calibration.slice_eff(slice_bytes) or 1.0) if sliced else 1.0", "eff = 1.0",
     [PV, U + "test_pinned_cost_model.py"]),
    ("the scheduler's token budget halved (batching.RankScheduler.next_batch: the tokens one context iteration "
     "packs)", "dwdp_trtllm/spec/batching.py",
     "        budget = self.max_num_tokens\n", "        budget = self.max_num_tokens // 2\n",
     [U + "test_scheduler.py"]),
    ("the sizing simulator's context budget halved (simulator._Ctx: MNT // 2 per rank)",
     "dwdp_trtllm/sizing/simulator.py", "RankScheduler([], mnt, max_batch or None, chunked)",
     "RankScheduler([], mnt // 2, max_batch or None, chunked)", [U + "test_sizing_sim.py"]),
    ("interference: a long kernel beside a short pull (interference)", "dwdp_trtllm/calibrate/interference.py",
     "if one > copy_alone:", "if False:", [PV, U + "test_pinned_calibrate_peer.py"]),
    ("interference: a short kernel not repeated to the pull's length", "dwdp_trtllm/calibrate/interference.py",
     "calls = max(1, round(copy_alone / max(one, 1e-6)))", "calls = 1", [PV, U + "test_pinned_calibrate_peer.py"]),
]


def main() -> int:
    env = dict(os.environ)
    survived = 0
    for name, path, old, new, tests in CASES:
        work = Path(tempfile.mkdtemp(prefix="dwdp-mutclass-"))
        try:
            _copy_checkout(work)
            src = (work / path).read_text()
            if src.count(old) != 1:
                print(f"{path}: the text to mutate for {name!r} is not there once (the code moved: update this list)")
                return 2
            (work / path).write_text(src.replace(old, new))
            env["PYTHONPATH"] = str(work)
            cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *tests]
            r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        killed = r.returncode == 1  # a test failed (2+: the run itself broke: not a kill)
        survived += not killed
        print(f"{'KILLED  ' if killed else 'SURVIVED'} {name} [{' '.join(Path(t).name for t in tests)}]", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
