"""`trtllm-serve ... --custom_module_dirs <this directory>`: activates the dwdp_trtllm hook in the CLI process.

TensorRT-LLM imports this package by name (import_custom_module_from_dir). Processes it spawns through
MPI do not import it; they rely on the .pth hook (`dwdp serve` / `integration.hook.install_pth`).
"""
from dwdp_trtllm.integration.boot import activate

activate(explicit=True)
