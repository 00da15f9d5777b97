"""PyExecutor forward step: in the lifecycle era it calls DwdpManager.prefetch_first_layers() at each forward
start (MOE_DEVELOPER_GUIDE, stored id 68282709368: "PyExecutor forward start -> DwdpManager.
prefetch_first_layers()"), then the model engine's forward."""
# DWDP-LIFECYCLE-BEGIN
from .dwdp import get_global_dwdp_manager
# DWDP-LIFECYCLE-END


class PyExecutor:
    def __init__(self, model_engine):
        self.model_engine = model_engine

    def forward_step(self, hidden_states):
# DWDP-LIFECYCLE-BEGIN
        mgr = get_global_dwdp_manager()
        if mgr is not None:
            mgr.prefetch_first_layers()
# DWDP-LIFECYCLE-END
        return self.model_engine.forward(hidden_states)
