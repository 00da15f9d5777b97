"""pyexecutor/dwdp.py: the global DWDP manager slot and upstream's own DwdpManager class.

- set_/get_global_dwdp_manager: as tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af04538bc (IPC era) and the VA
  era (stored id 56230681187): a module global read by ConfigurableMoE.__init__ (PyExecutor uses the manager
  that py_executor_creator hands it, not this global: see py_executor.py).
- DwdpManager: which methods exist, and its lifecycle (its engine is not modelled; those methods raise). IPC era
  (@ 198af04538bc, 753d71ccd9f1): add_layer returns a DwdpLayerHandleCollector, prefetch_first_layers,
  build_weight_view (used by moe_scheduler for CuteDslFusedMoE only), record_compute_and_prefetch_next; NO
  wait_and_bind. VA era (stored id 56230681187): add_layer, setup, prefetch_first_layers, wait_and_bind,
  record_compute_and_prefetch_next, and the lifecycle modelled here as there: `__init__(config, dist, mapping)` keeps
  num_experts_per_worker / num_groups / num_prefetch_experts of the config (the MPIDist / mapping checks and the
  MPI group are left out: dist and mapping may be None, so dwdp_size comes from config.dwdp_size where upstream
  reads mapping.dwdp_size, and dwdp_rank / rank / dwdp_group are absent); `__enter__` raises "DwdpManager already registered
  globally" when get_global_dwdp_manager() is not None, else registers itself; `__exit__` = cleanup() +
  set_global_dwdp_manager(None), returns False; cleanup() is idempotent (upstream's frees dwdp_group and drops
  the weight manager; here there is neither).
"""
_global_dwdp_manager = None


def set_global_dwdp_manager(manager):
    global _global_dwdp_manager
    _global_dwdp_manager = manager


def get_global_dwdp_manager():
    return _global_dwdp_manager


class DwdpManager:
    def __init__(self, config, dist, mapping):
        self.config, self.dist, self._mapping = config, dist, mapping
        self.dwdp_size = config.dwdp_size
        self.num_experts_per_worker = config.num_experts_per_worker
        self.num_groups = config.num_groups
        self.num_prefetch_experts = config.num_prefetch_experts
        self._registered_layers = []

    def __enter__(self):
        if get_global_dwdp_manager() is not None:
            raise RuntimeError("DwdpManager already registered globally")
        set_global_dwdp_manager(self)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.cleanup()
        set_global_dwdp_manager(None)
        return False

    def cleanup(self):
        pass

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
