"""The engine's name for the core's chunked-prefill batching (dwdp_trtllm/batching.py: RankScheduler), kept for
importers outside the engine's files (bench/synthetic.py, tests/unit/test_preflight.py); new code imports the core."""
from __future__ import annotations

from ..batching import RankScheduler  # noqa: F401
