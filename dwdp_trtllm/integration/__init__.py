"""The TensorRT-LLM host of the DWDP core, one folder (docs/TRTLLM.md).

Host-neutral (no tensorrt_llm import):
  boot.py           activation entry point (the .pth line, --custom_module_dirs)
  hook.py           post-import finder; the .pth line and its installer
  process_role.py   this process: integration config, MPI rank, engine, expert placement, HopperDwdpManager
  settings.py       the integration config file; translation to/from upstream's dwdp_config
  serving_features.py  the serving-feature matrix: each TensorRT-LLM setting supported or refused before load
  server_configs.py the servers of extra-llm-api / disaggregated YAML files, read as TensorRT-LLM reads them
  config_check.py   one verdict per server before launch (dwdp check-config): refusals, memory, KV cache
  gen_config.py     YAML generators for trtllm-serve / disaggregated deployments
  group.py          the DWDP group of the context ranks (Create_group, as upstream)
  adapter.py        AdapterRuntime: TensorRT-LLM's expert tensors on the core's transport / CopyScheduler / Prefetcher;
                    its close(): shutdown barrier, then everything released
  gemm_choice.py    which expert path (choose_gemm) and transport (transport_for) the adapter uses, and why
  full_slot.py, composite_cpu.py   merge-path copy ops; CPU stand-in of the composite view
  hopper_manager.py HopperDwdpManager: upstream's DwdpManager interface (lifecycle calls, layout attributes)
  moe_hooks.py      MoE forward hooks driving it where upstream's lifecycle is absent
  moe_evidence.py   the default expert path per weight dtype and GPU, and the measurement behind the FP8 one
trtllm/ is the only place that touches tensorrt_llm, and only after TensorRT-LLM imported the target modules.
Imports run one way: boot -> hook, trtllm/patches -> process_role, trtllm/* -> the modules above -> the core.
"""
