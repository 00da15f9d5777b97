"""ModelLoader, as tensorrt_llm/_torch/pyexecutor/model_loader.py @ 004b733e0ed7: load(checkpoint_dir,
checkpoint_loader) builds the model, loads the weights, runs post_load_weights on every module that has it
(skipping modules marked _weights_removed) and returns (model, moe_load_balancer); the loader keeps
self.llm_args. @ b51992a3 the loader has self.pytorch_backend_config and no llm_args (hooks era here).
reload(model, weights, allow_partial_loading=False) (model_loader.py @ 004b733e): writes `weights` through
model.load_weights into the model's existing Parameters (the weight mapper and partial loading are not modelled)."""
from types import SimpleNamespace

import torch

from ..models.modeling_tiny import TinyDecoder, tiny_checkpoint


class ModelLoader:
    def __init__(self, args):
# DWDP-BEGIN
        self.llm_args = args
# DWDP-END
# HOOKS-ERA: self.pytorch_backend_config = args
        self._args = args

    def load(self, checkpoint_dir, checkpoint_loader):
        a = self._args
        # TP1 without attention DP; dp_size is what CutlassFusedMoE.select_alltoall_method_type reads (id 55194060208)
        mapping = SimpleNamespace(moe_ep_size=1, moe_ep_rank=0, moe_tp_size=1, tp_size=1, dp_size=1)
        model = TinyDecoder(SimpleNamespace(mapping=mapping, quant_config=a.quant))
        model.load_weights(tiny_checkpoint(a.seed, a.quant))
        if torch.cuda.is_available():  # TensorRT-LLM builds the model on the current CUDA device
            model.to(torch.device("cuda", torch.cuda.current_device()))
        for m in model.modules():
            if hasattr(m, "post_load_weights") and not getattr(m, "_weights_removed", False):
                m.post_load_weights()
        return model, None

    def reload(self, model, weights, allow_partial_loading=False):
        model.load_weights(weights)
