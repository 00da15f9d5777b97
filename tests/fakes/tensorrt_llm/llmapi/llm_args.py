"""TorchLlmArgs field names only, as tensorrt_llm/llmapi/llm_args.py (newest stored, id 55143598664):
BaseLlmArgs.backend: Optional[str] (deprecated), disable_overlap_scheduler, moe_config, and in DWDP-era
versions dwdp_config: Optional[DwdpConfig] (prototype). `dwdp check-trtllm` reads model_fields."""
_FIELDS = ["backend", "disable_overlap_scheduler", "moe_config", "cuda_graph_config"]
# DWDP-BEGIN
_FIELDS.append("dwdp_config")
# DWDP-END


class TorchLlmArgs:
    model_fields = dict.fromkeys(_FIELDS)
