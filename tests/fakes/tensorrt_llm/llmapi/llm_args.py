"""TorchLlmArgs and the configs the serving-feature matrix reads, as tensorrt_llm/llmapi/llm_args.py @
0004396720054fd8 (the field names and defaults below were read there):
- TorchLlmArgs.cuda_graph_config: Optional[CudaGraphConfigType], default_factory=CudaGraphConfig (CUDA graphs ON when
  the key is omitted; null disables); torch_compile_config: Optional[TorchCompileConfig] = None;
  prefill_cuda_graph_backend: PrefillCudaGraphBackend = "disabled"; disable_overlap_scheduler = False;
  moe_config: MoeConfig (default_factory); dwdp_config: Optional[DwdpConfig] = None (DWDP-era versions only);
- MoeConfig: backend = "AUTO", max_num_tokens = None, load_balancer = None;
- TorchCompileConfig.enable_piecewise_cuda_graph = False;
- MTPDecodingConfig (decoding_type "MTP"): use_mtp_vanilla = False, mtp_eagle_one_model = True;
  EagleDecodingConfig (decoding_type "Eagle"): eagle3_one_model = True; DraftTargetDecodingConfig ("Draft_Target").
speculative_config defaults to None (BaseLlmArgs); the other BaseLlmArgs fields the matrix reads (enable_attention_dp,
tensor_parallel_size, ...) are left unset here unless a test passes them: the matrix skips a key an args object does
not have. Validation (pydantic, extra="forbid") is not modelled; extra keyword arguments (the fake ModelLoader's quant,
seed) become attributes.
`dwdp check-trtllm` reads TorchLlmArgs.model_fields."""
_FIELDS = ["backend", "disable_overlap_scheduler", "moe_config", "cuda_graph_config"]
# DWDP-BEGIN
_FIELDS.append("dwdp_config")
# DWDP-END


class _Config:
    _defaults: dict = {}

    def __init__(self, **kwargs):
        for k, v in {**self._defaults, **kwargs}.items():
            setattr(self, k, v)


class CudaGraphConfig(_Config):
    _defaults = {"batch_sizes": None, "max_batch_size": 0, "enable_padding": False}


class TorchCompileConfig(_Config):
    _defaults = {"enable_fullgraph": True, "enable_inductor": False, "enable_piecewise_cuda_graph": False}


class MoeConfig(_Config):
    _defaults = {"backend": "AUTO", "max_num_tokens": None, "load_balancer": None}


class MTPDecodingConfig(_Config):
    _defaults = {"decoding_type": "MTP", "max_draft_len": None, "use_mtp_vanilla": False, "mtp_eagle_one_model": True}


class EagleDecodingConfig(_Config):
    _defaults = {"decoding_type": "Eagle", "max_draft_len": 3, "eagle3_one_model": True}


class DraftTargetDecodingConfig(_Config):
    _defaults = {"decoding_type": "Draft_Target", "max_draft_len": 3}


class TorchLlmArgs(_Config):
    model_fields = dict.fromkeys(_FIELDS)

    def __init__(self, **kwargs):
        defaults = {"cuda_graph_config": CudaGraphConfig(), "torch_compile_config": None,
                    "prefill_cuda_graph_backend": "disabled", "disable_overlap_scheduler": False,
                    "moe_config": MoeConfig(), "speculative_config": None}
# DWDP-BEGIN
        defaults["dwdp_config"] = None
# DWDP-END
        super().__init__(**{**defaults, **kwargs})
