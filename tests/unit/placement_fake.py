"""A stand-in for core/placement.ExpertPlacement where only the prefetch's counts matter (perf/cost_model.fetch_bytes
reads dwdp_size, fetch_experts(rank) and max_source_load()): the experts each rank pulls and the most any source
serves, given directly."""
from __future__ import annotations


class FakePlacement:
    def __init__(self, size: int, pulled: list[int], served: int):
        self.dwdp_size, self._pulled, self._served = size, pulled, served

    def fetch_experts(self, r: int) -> list[int]:
        return list(range(self._pulled[r]))

    def max_source_load(self) -> int:
        return self._served
