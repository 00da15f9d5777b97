"""A small, honest DeepSeek-style MoE decoder for the context phase (prefill only, no LM head).

Shape legend: T packed tokens of this iteration, H hidden, E experts, K top-k.

Per layer: x += attention(rms(x)); then x += dense_mlp(rms(x)) for the first_k_dense layers, else
x += shared_experts(h) + routed(h) with h = rms(x), where the routed part goes through the
ExpertBackend (reference / DEP / DWDP). Each residual add runs fused with the norm that follows it.
Timing phases: "attention" (attention + residual add + post-attention norm), "other" (router, shared
experts, dense MLPs, embedding, residual add + next norm); the backend times its own work (DWDP and one-rank DEP:
the whole routed-expert op as "expert_gemm", engine/dwdp.py, engine/dep.py).
"""
from __future__ import annotations

import torch

from ..spec.models import ModelSpec
from .experts import ExpertBackend
from .fp8_linear import Fp8Linear, dequantize_linears, to_fp8_linears
from .kv_cache import KVCache
from .layers import add_rms_norm, make_attention, plan_segments, positions_of, rms_norm, swiglu_mlp
from .local_experts import LocalExperts
from .records import Segment
from .rope import rope_cos_sin
from .router import SkewTable, router_logits, select_experts
from .timing import PhaseTimer, phase
from .weights import dense_dtype, dense_weight_shapes, init_dense_weights


def check_dense_weights(spec: ModelSpec, weights: dict[str, torch.Tensor]) -> None:
    """Every tensor of dense_weight_shapes(spec) present with its shape; else an error naming it."""
    for name, shape in dense_weight_shapes(spec).items():
        if name not in weights:
            raise ValueError(f"dense weights of {spec.name}: missing {name!r} (expected shape {shape})")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"dense weights of {spec.name}: {name!r} has shape {tuple(weights[name].shape)}, expected {shape}")


class MoETransformer:
    """Forward of a packed batch of segments; routed experts delegated to `experts`."""

    def __init__(self, spec: ModelSpec, dense_weights: dict[str, torch.Tensor], experts: ExpertBackend, *,
                 device: torch.device | str, dtype: torch.dtype, fp8_linear: bool = False):
        """dense_weights: weights.dense_weight_shapes tensors (float, or e4m3 codes with a `<name>_scale_inv` beside
        them, as an FP8 checkpoint stores its linear layers). fp8_linear: run the linear layers an FP8 checkpoint
        quantises as FP8 block-scale GEMMs (engine/fp8_linear.py; the checkpoint's codes and scales, or our
        128x128 quantisation of float weights); off, codes are dequantised and every GEMM runs at `dtype`."""
        check_dense_weights(spec, dense_weights)
        self.spec, self.experts = spec, experts
        self.device, self.dtype, self.fp8_linear = torch.device(device), dtype, fp8_linear
        on_device = {n: t.to(self.device) for n, t in dense_weights.items()}
        if fp8_linear:
            self.w = {n: (t if isinstance(t, Fp8Linear) else t.to(dense_dtype(n, dtype)))
                      for n, t in to_fp8_linears(spec, on_device).items()}
        else:
            self.w = dequantize_linears(on_device, lambda n: dense_dtype(n, dtype))
        self.attn = [make_attention(spec, self.w, i) for i in range(spec.num_layers)]
        #: [MoE layer, expert] routed pairs of the last forward (record_routing()); None: not recorded
        self.counts_ME: torch.Tensor | None = None
        #: routing skew (workload.routing_skew): target popularity per MoE layer; None: the model's own routing
        self.skew: SkewTable | None = None

    def dense_bytes(self) -> int:
        """Bytes of the replicated weights as held (FP8 linears: codes + scales)."""
        return sum(t.nbytes() if isinstance(t, Fp8Linear) else t.numel() * t.element_size() for t in self.w.values())

    def warm_up_attention(self, max_tokens: int) -> int:
        """CUDA: build the attention kernels' per-shape plans for every chunk length up to max_tokens now
        (engine/attention_cuda.py), so measured iterations do not pay for them. Returns the plans built."""
        from .layers import _cudnn_ok
        sp = self.spec
        if self.device.type != "cuda" or self.dtype not in (torch.bfloat16, torch.float16):
            return 0
        d = sp.qk_nope_head_dim + sp.qk_rope_head_dim if sp.attention == "mla" else sp.head_dim
        e = sp.v_head_dim if sp.attention == "mla" else sp.head_dim
        G = sp.num_heads if sp.attention == "mla" else sp.num_kv_heads
        probe = torch.empty(1, sp.num_heads, d, device=self.device, dtype=self.dtype)
        if not _cudnn_ok(probe, probe.new_empty(1, G, d)):
            return 0
        from .attention_cuda import warm_plans
        return warm_plans(sp.num_heads, d, e, max_tokens, self.device, self.dtype)

    def set_routing_skew(self, popularity_ME, seed: int = 0) -> None:
        """Steer routing to popularity_ME ([MoE layers, experts] shares, routing_skew.popularity_table); None: off."""
        if popularity_ME is None:
            self.skew = None
            return
        table = SkewTable(popularity_ME, self.spec.top_k, self.device, seed)
        if len(table) != self.spec.num_moe_layers or table.cdf_ME.shape[1] != self.spec.num_experts:
            raise ValueError(f"routing skew: popularity of shape {tuple(table.cdf_ME.shape)}, the model has "
                             f"{self.spec.num_moe_layers} MoE layers x {self.spec.num_experts} experts")
        self.skew = table

    def record_routing(self, on: bool = True) -> None:
        """Count the routed pairs per expert of each MoE layer in every forward (read with routing_counts())."""
        self.counts_ME = torch.zeros(self.spec.num_moe_layers, self.spec.num_experts, dtype=torch.int64,
                                     device=self.device) if on else None

    def routing_counts(self) -> list[list[int]] | None:
        """The last forward's counts (host copy: call after the iteration's sync) and reset them."""
        if self.counts_ME is None:
            return None
        out = self.counts_ME.tolist()
        self.counts_ME.zero_()
        return out

    def _moe(self, layer: int, h_TH: torch.Tensor, timer: PhaseTimer | None) -> torch.Tensor:
        sp, p = self.spec, f"model.layers.{layer}.mlp."
        with phase(timer, "other", layer):
            logits_TE = router_logits(h_TH, self.w[p + "gate.weight"])
            ids_TK, w_TK = select_experts(sp, logits_TE, self.w.get(p + "gate.e_score_correction_bias"),
                                          skew=self.skew, moe_layer=layer - sp.first_k_dense)
            if self.counts_ME is not None:  # routing record for the floor (one small kernel, no host sync)
                self.counts_ME[layer - sp.first_k_dense].scatter_add_(0, ids_TK.reshape(-1), torch.ones_like(ids_TK.reshape(-1)))
            shared_TH = (swiglu_mlp(h_TH, *(self.w[p + f"shared_experts.{n}_proj.weight"] for n in ("gate", "up", "down")))
                         if sp.num_shared_experts else None)
        y_TH = self.experts.forward(layer - sp.first_k_dense, h_TH, ids_TK, w_TK)
        return y_TH, shared_TH  # added by the caller's add_rms_norm (one pass with the residual add)

    def forward(self, input_ids_T: torch.Tensor, segments: list[Segment], kv_cache: KVCache | None = None,
                timer: PhaseTimer | None = None) -> torch.Tensor:
        """hidden_TH after the final norm for the packed `segments` (tokens in segment order).

        Segments with start > 0 or is_last False need `kv_cache`; the cache of a request is freed
        after its final chunk."""
        sp, w = self.spec, self.w
        if input_ids_T.dim() != 1:
            raise ValueError(f"input_ids_T: expected 1-D token ids, got shape {tuple(input_ids_T.shape)}")
        plan = plan_segments(segments, input_ids_T.shape[0], kv_cache)
        with phase(timer, "other", -1):
            x_TH = w["model.embed_tokens.weight"].index_select(0, input_ids_T.to(self.device))
            rope = rope_cos_sin(positions_of(segments, self.device), sp)
            h_TH = rms_norm(x_TH, w["model.layers.0.input_layernorm.weight"], sp.rms_eps)
        for layer in range(sp.num_layers):
            p = f"model.layers.{layer}."
            with phase(timer, "attention", layer):
                # the residual add and the next norm run as one pass (layers.add_rms_norm)
                x_TH, h_TH = add_rms_norm(x_TH, self.attn[layer](h_TH, rope, plan, kv_cache),
                                          w[p + "post_attention_layernorm.weight"], sp.rms_eps)
            if layer < sp.first_k_dense:
                with phase(timer, "other", layer):
                    m_TH, shared_TH = swiglu_mlp(h_TH, *(w[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))), None
            else:
                self.experts.on_attention_done(layer - sp.first_k_dense)
                m_TH, shared_TH = self._moe(layer, h_TH, timer)
            nxt = f"model.layers.{layer + 1}.input_layernorm.weight" if layer + 1 < sp.num_layers else "model.norm.weight"
            with phase(timer, "other", layer):
                x_TH, h_TH = add_rms_norm(x_TH, m_TH, w[nxt], sp.rms_eps, shared_TH)
        if kv_cache is not None:
            for s in segments:
                if s.is_last:
                    kv_cache.free(s.request_id)
        return h_TH  # the last add_rms_norm applied the final norm

    __call__ = forward


def build_reference_model(spec: ModelSpec, seed: int, dtype: torch.dtype, device: torch.device | str,
                          gemm: str = "reference", weight_dtype: str | None = None, *,
                          on_device: bool = False, fp8_linear: bool = False) -> MoETransformer:
    """Seeded dense weights + LocalExperts (weight_dtype defaults to the model dtype: float32 or bf16;
    on_device: draw the weights with the device's generator, see weights.init_expert)."""
    if weight_dtype is None:
        names = {torch.float32: "float32", torch.bfloat16: "bf16"}
        if dtype not in names:
            raise ValueError(f"dtype {dtype}: pass weight_dtype explicitly (float32|bf16|fp8)")
        weight_dtype = names[dtype]
    experts = LocalExperts.from_seed(spec, seed, weight_dtype, device, gemm=gemm, on_device=on_device)
    dense = init_dense_weights(spec, seed, dtype, device, on_device=on_device)
    return MoETransformer(spec, dense, experts, device=device, dtype=dtype, fp8_linear=fp8_linear)
