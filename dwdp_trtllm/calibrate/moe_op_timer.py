"""The whole routed-expert op on one device, timed for `dwdp calibrate` (calibrate/moe_op.py's MoeOpTimer): random
experts of the model's shapes (FP8 with 128x128 block scales, or BF16) in the buffers DWDP rank 0 of a group holds
([local | slot]; one [E, ...] buffer for the composite view, which presents them as one range), the rows of
`tokens` tokens routed exactly balanced or by power_law_1.01, and engine/moe_compute.routed_experts_forward with the
gemm path, timed by bench/floor_timer.FloorTimer.time_ms (CUDA events, median of the repeats after warm-up).

Shape legend: T tokens, K top-k, E experts, H hidden, I moe intermediate.
"""
from __future__ import annotations

import torch

from ..spec.models import ModelSpec
from .moe_op import rank0_split

#: one-buffer paths: the view holds every expert in one expert-ordered range
ONE_BUFFER = ("composite_view",)


def _experts(E: int, N: int, D: int, fp8: bool, dev, g):
    """[E, N, D] weights (+ [E, N/128, D/128] fp32 scales for fp8, else None), 16 experts at a time (bounded
    temporaries at R1 width)."""
    dt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    w = torch.empty(E, N, D, device=dev, dtype=dt)
    for i in range(0, E, 16):
        x = torch.randn(min(16, E - i), N, D, device=dev, generator=g)
        w[i:i + 16] = (x * 64).to(dt) if fp8 else (x * D ** -0.5).to(dt)
    if not fp8:
        return w, None
    return w, torch.rand(E, -(-N // 128), -(-D // 128), device=dev, generator=g) * 1e-3 + 1e-4


def _rows(w, experts: list[int]):
    """w[experts] as a new contiguous tensor (FP8 rows moved as bytes: index kernels lack float8 on some devices)."""
    idx = torch.tensor(experts, device=w.device)
    if w.dtype == torch.float8_e4m3fn:
        return w.view(torch.uint8).index_select(0, idx).view(w.dtype).contiguous()
    return w.index_select(0, idx).contiguous()


class EngineMoeOp:
    """MoeOpTimer of engine/moe_compute.routed_experts_forward with `gemm` over DWDP rank 0's buffers."""

    def __init__(self, spec: ModelSpec, weight_dtype: str, gemm: str, dwdp_size: int, device: torch.device, time_ms):
        from ..engine.moe_compute import gemm_path, identity_map

        gemm_path(gemm)  # an unknown path fails here, naming the choices
        self.spec, self.gemm, self.device, self._time = spec, gemm, device, time_ms
        E, H, I = spec.num_experts, spec.hidden_size, spec.moe_intermediate
        g = torch.Generator(device=device).manual_seed(0)
        fp8 = weight_dtype == "fp8"
        full = {"w13": _experts(E, 2 * I, H, fp8, device, g), "w2": _experts(E, H, I, fp8, device, g)}
        if gemm in ONE_BUFFER:
            self.idx_E, self.row_E = identity_map(E, device)
            self.bufs = {k: ([w], [s] if s is not None else None) for k, (w, s) in full.items()}
        else:
            loc = rank0_split(spec, dwdp_size)
            order = [[e for e, (b, _) in enumerate(loc) if b == i] for i in (0, 1)]
            order = [o for o in order if o]  # G = 1: no slot
            self.idx_E = torch.tensor([b for b, _ in loc], dtype=torch.int32, device=device)
            self.row_E = torch.tensor([r for _, r in loc], dtype=torch.int32, device=device)
            self.bufs = {k: ([_rows(w, o) for o in order], [_rows(s, o) for o in order] if s is not None else None)
                         for k, (w, s) in full.items()}
        del full
        self._gen = torch.Generator(device=device).manual_seed(1)

    def routing(self, tokens: int, routing: str):
        """(ids_TK int64, weights_TK float32): balanced = expert (t*K + k) mod E (every expert the same rows when E
        divides T*K); power_law_1.01 = the engine's router steered to routing_skew's power law drawn for `tokens`."""
        from ..engine.router import SkewTable, router_scores, skew_select
        from ..spec.routing_skew import RoutingSkewConfig, popularity

        sp, dev = self.spec, self.device
        E, K = sp.num_experts, sp.top_k
        logits_TE = torch.randn(tokens, E, device=dev, generator=self._gen)
        ids_TK = (torch.arange(tokens, device=dev)[:, None] * K + torch.arange(K, device=dev)[None, :]) % E
        if routing == "power_law_1.01":
            pop_E = popularity(RoutingSkewConfig(kind="power_law", alpha=1.01, tokens=tokens), 0, E, K)
            ids_TK, w_TK = skew_select(sp, logits_TE, ids_TK, SkewTable(pop_E[None], K, dev), 0)
        elif routing == "balanced":
            w_TK = router_scores(sp, logits_TE).gather(1, ids_TK)
        else:
            raise ValueError(f"routing {routing!r}: expected balanced or power_law_1.01")
        return ids_TK.long(), (w_TK / w_TK.sum(-1, keepdim=True)).float()

    def time_ms(self, tokens: int, routing: str) -> float:
        from ..engine.moe_compute import routed_experts_forward

        x_TH = torch.randn(tokens, self.spec.hidden_size, device=self.device, generator=self._gen).to(torch.bfloat16)
        ids_TK, w_TK = self.routing(tokens, routing)
        (w13, s13), (w2, s2) = self.bufs["w13"], self.bufs["w2"]

        def call():
            return routed_experts_forward(x_TH, ids_TK, w_TK, w13, w2, self.idx_E, self.row_E, gemm=self.gemm,
                                          w13_scale_sources=s13, w2_scale_sources=s2)
        return self._time(call)

    def release(self) -> None:
        self.bufs = {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
