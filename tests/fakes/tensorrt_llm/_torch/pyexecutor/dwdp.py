"""Global DWDP manager slot, as tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af04538bc (and the VA era,
stored id 56230681187): a module global read by ConfigurableMoE.__init__ (PyExecutor uses the manager that
py_executor_creator hands it, not this global: see py_executor.py)."""
_global_dwdp_manager = None


def set_global_dwdp_manager(manager):
    global _global_dwdp_manager
    _global_dwdp_manager = manager


def get_global_dwdp_manager():
    return _global_dwdp_manager
