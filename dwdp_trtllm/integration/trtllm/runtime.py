"""Setup after TensorRT-LLM loaded the weights (wrapped ModelLoader.load), for the dwdp_trtllm engine.

Steps (every rank of a DWDP group runs them in the same order; nothing here has run against a real
TensorRT-LLM yet, see docs/TRTLLM.md "verified against"):
 1. checks: no upstream dwdp_config at the same time, overlap scheduler off, CUTLASS backend, dtypes;
 2. group: torch.distributed over the DWDP participants (mpi4py passes the rendezvous address);
 3. transport (dwdp_trtllm.transport.make_transport): each rank exports its own experts per (layer,
    tensor); the module's own storage is re-pointed at the exported buffer (no duplicate);
 4. full-slot buffers ([E, ...] per tensor, prefetch_depth + 1 slots) and the copy ops
    (copy_plan.build_copy_plan -> full_slot.full_slot_ops);
 5. backend fix-up to the full expert range (ep_size 1, slots 0..E), like upstream fixup_moe_backends;
 6. pipeline hooks (integration/pipeline.py): wait for layer l's slot, bind it, start l+depth.
Tensor legend: *_u8 = uint8 byte views.
"""
from __future__ import annotations

import os
import socket

import torch

from ...copy_plan import ExpertLayout, build_copy_plan
from ...transport import make_transport
from ..full_slot import full_slot_ops
from ..pipeline import LayerPipeline, SlotCopyExecutor

#: routed-expert tensors bound to full slots, by TensorRT-LLM attribute name (BF16, FP8 block scales)
WEIGHT_NAMES = ("w3_w1_weight", "w2_weight", "w3_w1_weight_scaling_factor", "w2_weight_scaling_factor",
                "w3_w1_weight_scale", "w2_weight_scale")


def _moe_modules(model):
    from tensorrt_llm._torch.modules.fused_moe.interface import MoE  # noqa: PLC0415 - lazy by design
    outer = []
    for name, mod in model.named_modules():
        if isinstance(mod, MoE) and hasattr(mod, "_dwdp_trtllm") and not any(
                name.startswith(o + ".") for o, _ in outer):
            outer.append((name, mod))
    return [m for _, m in outer]


def _weight_owner(moe):
    for mod in moe.modules():
        if "w3_w1_weight" in mod._parameters:
            return mod
    raise RuntimeError(f"{type(moe).__name__}: no module owns w3_w1_weight; unsupported MoE backend layout")


def _check(loader, owners) -> None:
    from tensorrt_llm._torch.modules.fused_moe.fused_moe_cutlass import CutlassFusedMoE  # noqa: PLC0415
    args = loader.llm_args
    if getattr(args, "dwdp_config", None) is not None:
        raise RuntimeError("engine dwdp_trtllm but the TensorRT-LLM YAML also sets dwdp_config (upstream's engine "
                           "would run too): remove dwdp_config there, or set engine: upstream in DWDP_TRTLLM_CONFIG")
    if not getattr(args, "disable_overlap_scheduler", False):
        raise RuntimeError("dwdp_trtllm needs disable_overlap_scheduler: true on context servers")
    for o in owners:
        if not isinstance(o, CutlassFusedMoE):
            raise RuntimeError(f"dwdp_trtllm binds full-slot weights into CutlassFusedMoE; got {type(o).__name__}: "
                               "set moe_config: {backend: CUTLASS}")


def _process_group(cfg, rank: int):
    """torch.distributed group of this rank's DWDP group; initialises a gloo world over the participants."""
    import torch.distributed as dist
    from mpi4py import MPI  # TensorRT-LLM launches workers with MPI
    world = cfg.world_size
    sub = MPI.COMM_WORLD.Split(0 if rank < world else MPI.UNDEFINED, rank)
    if not dist.is_initialized():
        addr = sub.bcast((socket.gethostname(), _free_port()) if sub.Get_rank() == 0 else None, root=0)
        dist.init_process_group("gloo", init_method=f"tcp://{addr[0]}:{addr[1]}", rank=sub.Get_rank(), world_size=world)
    groups = [dist.new_group(list(range(g * cfg.dwdp_size, (g + 1) * cfg.dwdp_size))) for g in range(cfg.num_groups)]
    return groups[rank // cfg.dwdp_size]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def setup_after_load(loader, model) -> None:
    from .activation import engine_for_process, global_rank, integration_config
    if engine_for_process() != "dwdp_trtllm":
        return
    icfg = integration_config()
    cfg = icfg.dwdp
    if cfg.gemm not in ("merge",):
        raise NotImplementedError(f"dwdp_config.gemm: {cfg.gemm} is not wired into TensorRT-LLM yet; use gemm: merge "
                                  "(full-slot buffers feeding the stock CUTLASS MoE)")
    moes = _moe_modules(model)
    if not moes:
        raise RuntimeError("dwdp_trtllm: no MoE layer received our layout (MoE.__init__ patch did not run?)")
    owners = [_weight_owner(m) for m in moes]
    _check(loader, owners)
    rank = global_rank()
    meta = moes[0]._dwdp_trtllm
    dwdp_rank, placement = meta["dwdp_rank"], meta["placement"]
    E, n_local = placement.num_experts, len(placement.local_experts[dwdp_rank])
    device = torch.device("cuda", torch.cuda.current_device())

    names = [n for n in WEIGHT_NAMES if getattr(owners[0], n, None) is not None]
    for o in owners:
        for pname, p in list(o.named_parameters(recurse=False)) + list(o.named_buffers(recurse=False)):
            if p is not None and p.dim() > 0 and p.shape[0] == n_local and pname not in names:
                raise RuntimeError(f"{type(o).__name__}.{pname} is per-expert ({tuple(p.shape)}) but not handled by "
                                   "dwdp_trtllm; unsupported quantisation for this integration")
    shapes = {n: (tuple(getattr(owners[0], n).shape[1:]), getattr(owners[0], n).dtype) for n in names}
    per_expert = [getattr(owners[0], n)[0].numel() * getattr(owners[0], n).element_size() for n in names]
    layout = ExpertLayout(tuple(names), tuple(per_expert))

    group = _process_group(cfg, rank)
    transport = make_transport(cfg.transport, group=group, dwdp_rank=dwdp_rank, dwdp_size=cfg.dwdp_size, device=device)
    exported = transport.allocate({f"L{pos}.{n}": n_local * nb for pos in range(len(owners)) for n, nb in zip(names, per_expert)})
    for pos, o in enumerate(owners):
        for n in names:
            p = getattr(o, n)
            buf_u8 = exported[f"L{pos}.{n}"]
            buf_u8.copy_(p.data.contiguous().view(torch.uint8).reshape(-1))
            p.data = buf_u8.view(p.dtype).view(p.shape)  # own storage now lives in the exported buffer
    transport.open_peers()

    plan = build_copy_plan(placement, layout, dwdp_rank, sliced=cfg.contention_opt, slice_bytes=cfg.slice_bytes)
    ops = full_slot_ops(placement, layout, dwdp_rank, plan)
    slots_u8 = [[torch.empty(E * nb, dtype=torch.uint8, device=device) for nb in per_expert] for _ in range(cfg.num_slots)]
    source = lambda peer, pos, t: transport.peer_buffer(peer, f"L{pos}.{names[t]}")  # noqa: E731
    executor = SlotCopyExecutor(ops, slots_u8, source)

    for o in owners:  # the backend now sees every expert as local (upstream fixup_moe_backends does the same)
        o.ep_size, o.ep_rank, o.expert_size_per_partition = 1, 0, E
        o.slot_start, o.slot_end, o.initial_local_expert_ids = 0, E, list(range(E))

    def bind(moe, pos: int, slot: int) -> None:
        o = owners[pos]
        for t, n in enumerate(names):
            shape, dtype = shapes[n]
            getattr(o, n).data = slots_u8[slot][t].view(dtype).view(E, *shape)

    pipeline = LayerPipeline(moes, executor, bind, cfg.prefetch_depth).attach(model)
    model._dwdp_trtllm_runtime = {"transport": transport, "pipeline": pipeline, "plan": plan, "ops": ops,
                                  "pid": os.getpid(), "dwdp_rank": dwdp_rank}
