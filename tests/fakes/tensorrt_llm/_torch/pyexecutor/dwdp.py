"""pyexecutor/dwdp.py: the global DWDP manager slot and upstream's own DwdpManager class.

- set_/get_global_dwdp_manager: as tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af04538bc (IPC era) and the VA
  era (stored id 56230681187): a module global read by ConfigurableMoE.__init__ (PyExecutor uses the manager
  that py_executor_creator hands it, not this global: see py_executor.py).
- DwdpManager: only which methods exist is modelled (its engine is not; the methods raise). IPC era
  (@ 198af04538bc, 753d71ccd9f1): add_layer returns a DwdpLayerHandleCollector, prefetch_first_layers,
  build_weight_view (used by moe_scheduler for CuteDslFusedMoE only), record_compute_and_prefetch_next; NO
  wait_and_bind. VA era (stored id 56230681187): add_layer, setup, prefetch_first_layers, wait_and_bind,
  record_compute_and_prefetch_next.
"""
_global_dwdp_manager = None


def set_global_dwdp_manager(manager):
    global _global_dwdp_manager
    _global_dwdp_manager = manager


def get_global_dwdp_manager():
    return _global_dwdp_manager


class DwdpManager:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("fake tensorrt_llm: upstream's own DWDP engine is not modelled")

    def add_layer(self, layer_idx):
        raise NotImplementedError

    def prefetch_first_layers(self):
        raise NotImplementedError

    def record_compute_and_prefetch_next(self, layer_idx):
        raise NotImplementedError
# IPC-BEGIN

    def build_weight_view(self, layer_idx, backend):
        raise NotImplementedError
# IPC-END
# VA-BEGIN

    def wait_and_bind(self, backend_module, layer_idx):
        raise NotImplementedError
# VA-END
