"""Per-request KV cache across the chunks of a chunked prefill (context phase only).

Shape legend: S cached tokens of one request, C kv_lora_rank, R qk_rope_head_dim, G kv heads, d head dim.

What a layer stores per request (post-RoPE, so later chunks never re-rotate):
    MLA: (ckv_SC latent after kv_a_layernorm, krope_SR)
    GQA: (k_SGd, v_SGd)
A request's cache lives from its first non-final chunk until `free(request_id)` (the model frees it
after the final chunk). Requests processed in a single chunk never touch the cache.
"""
from __future__ import annotations

import torch


class KVCache:
    """Plain per-(request, layer) tensors, grown by concatenation (chunks are few and large)."""

    def __init__(self, num_layers: int):
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.num_layers = num_layers
        self._store: dict[int, list[tuple[torch.Tensor, ...] | None]] = {}

    def length(self, request_id: int) -> int:
        """Tokens cached for `request_id` (0 when none), as seen by layer 0."""
        layers = self._store.get(request_id)
        if layers is None or layers[0] is None:
            return 0
        return int(layers[0][0].shape[0])

    def prefix(self, request_id: int, layer: int) -> tuple[torch.Tensor, ...] | None:
        """The cached tensors of (request, layer), or None when nothing is cached."""
        layers = self._store.get(request_id)
        return None if layers is None else layers[layer]

    def extend(self, request_id: int, layer: int, new: tuple[torch.Tensor, ...]) -> None:
        """Append one chunk's tensors (token dim 0) to (request, layer)."""
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer {layer} not in [0, {self.num_layers})")
        layers = self._store.setdefault(request_id, [None] * self.num_layers)
        old = layers[layer]
        layers[layer] = new if old is None else tuple(torch.cat([o, n]) for o, n in zip(old, new))

    def free(self, request_id: int) -> None:
        """Drop everything cached for `request_id` (no-op when absent)."""
        self._store.pop(request_id, None)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._store

    @property
    def num_requests(self) -> int:
        return len(self._store)
