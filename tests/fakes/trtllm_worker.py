"""One rank of a fake disaggregated TensorRT-LLM world (or the single-process reference).

Argv: OUT_DIR MODE, MODE in {world, reference}. Env: FAKE_CTX_RANKS, FAKE_GEN_RANKS, FAKE_QUANT (bf16 |
fp8_block_scales), FAKE_STEPS, FAKE_TOKENS, FAKE_SHUTDOWN_DELAY ("rank:seconds,...": those ranks begin their executor's
shutdown that long after every other context rank began its), FAKE_SHUTDOWN_AFTER ("rank:peer,...": that rank begins
its shutdown once the peer's returned), FAKE_SHUTDOWN_DIE (a rank that exits before its shutdown, saving only
{"died_before_shutdown": True}), TRTLLM_DWDP_RANK (a rendezvous launch: no MPI world, that context rank; the
integration forms its group from TRTLLM_DWDP_MASTER_ADDR / PORT), FAKE_DIE_AFTER_FORWARD ("rank:n": that rank exits
after its n-th forward, saving {"died_after_forward": n, "outs": ...}; the others wait until it is gone, then go on;
errors of their forwards are saved), FAKE_KEEPS_PEER_MEMORY (0: the shm transport is treated as one that does not
keep a dead peer's memory, as legacy CUDA IPC), FAKE_HANG (a rank whose executor hung: a worker thread still running and its hang
detector fired before its shutdown), FAKE_MEASURE_MEMORY (1, CUDA: device free memory just before and after every
context rank's shutdown, context ranks in step, and the transport's exported bytes), FAKE_CAPTURE (1, CUDA: after the first forward, a CUDA graph capture around one DWDP layer,
its exception saved), FAKE_MTP (modeling_tiny: MTP draft steps per forward), FAKE_SKIP ("step:n,...": those steps' forwards stop after n trunk
layers, world and reference alike), FAKE_MODELS (world: models built one after the other in each context
process, each executor shut down before the next; default 1), FAKE_REF_GEMM (multi_buffer: the reference's backends compute through
our execution unit on their full expert set, integration/trtllm/moe_unit.install_reference). world: every rank runs split_world_comm (all ranks, once);
generation ranks leave without any DWDP call; context ranks build the model through ModelLoader.load (our
activation wraps it when DWDP_TRTLLM_CONFIG is set) and run FAKE_STEPS forwards through PyExecutor ->
model_engine -> model.forward(...) directly, saving outputs to OUT_DIR/out_{rank}.pt. reference: no DWDP,
every context rank's inputs through one full-expert model, saved to OUT_DIR/ref.pt.
"""
import glob
import logging
import os
import sys
import threading
import time

import torch

out_dir, mode = sys.argv[1], sys.argv[2]
ctx, gen = int(os.environ["FAKE_CTX_RANKS"]), int(os.environ.get("FAKE_GEN_RANKS", "0"))
quant = os.environ["FAKE_QUANT"]
steps, tokens = int(os.environ.get("FAKE_STEPS", "3")), int(os.environ.get("FAKE_TOKENS", "16"))


def inputs(rank, step):
    from tensorrt_llm._torch.models.modeling_tiny import H
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(tokens + 3 * step, H, generator=g)
    return x.cuda() if torch.cuda.is_available() else x


SKIP = dict(tuple(map(int, d.split(":"))) for d in os.environ.get("FAKE_SKIP", "").split(",") if d)


def step(model, ex, rank, s):
    """One forward of step s for rank's inputs (FAKE_SKIP: a forward that stops early)."""
    model.run_layers = SKIP.get(s)
    return ex.forward_step(inputs(rank, s)).cpu()


def capture_moe_layer(model, x):
    """Capture a CUDA graph around the first MoE block (its experts are a DWDP layer), as TensorRT-LLM's CUDA graph
    warmup captures the model's forward; the exception chain's text ("Type: message" each), None if nothing raised."""
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            model.mlp[0](x)
    except Exception as e:  # noqa: BLE001 - the test reads what was raised
        chain = []
        while e is not None:
            chain.append(f"{type(e).__name__}: {e}")
            e = e.__context__
        return " | ".join(chain)
    return None


def build():
    if os.environ.get("DWDP_TRTLLM_CONFIG"):
        import dwdp_trtllm.integration.boot  # noqa: F401  (what the .pth line does in every interpreter)
    if os.environ.get("FAKE_KEEPS_PEER_MEMORY") == "0":  # the decision path of a transport that does not (legacy IPC)
        from dwdp_trtllm.core.transport.shm import ShmTransport
        ShmTransport.keeps_peer_memory = False
    from tensorrt_llm._torch.pyexecutor.model_engine import PyTorchModelEngine
    from tensorrt_llm._torch.pyexecutor.model_loader import ModelLoader
    from tensorrt_llm._torch.pyexecutor.py_executor_creator import create_py_executor
    from tensorrt_llm.llmapi.llm_args import MoeConfig, TorchLlmArgs
    # a context server's settings as gen-config writes them (CUDA graphs off, overlap scheduler off, CUTLASS)
    args = TorchLlmArgs(quant=None if quant == "bf16" else quant, seed=7, disable_overlap_scheduler=True,
                        cuda_graph_config=None, moe_config=MoeConfig(backend="CUTLASS"))
    loader = ModelLoader(args)
    model, _ = loader.load("ckpt", None)
    build.loader = loader
    return model, create_py_executor(args, PyTorchModelEngine(model))


def precomputed_route(model, rank):
    """The first MoE layer run on a top-k computed outside it, through ConfigurableMoE.forward_precomputed_route (what
    upstream's scheduler tests drive), every expert of the layer chosen by some token."""
    x = inputs(rank, 0)
    experts = model.mlp[0].experts
    ids = (torch.arange(x.shape[0] * 2, device=x.device).view(-1, 2) * 3 + rank) % experts.num_experts
    return experts.forward_precomputed_route(x, ids.to(torch.int32), torch.full(ids.shape, 0.5, device=x.device))


if mode == "reference":
    model, ex = build()
    if os.environ.get("FAKE_REF_GEMM") == "multi_buffer":
        from dwdp_trtllm.integration.trtllm.moe_unit import install_reference
        assert len(install_reference(model)) > 0
    ref = {(r, s): step(model, ex, r, s) for r in range(ctx) for s in range(steps)}
    ref.update({("precomputed", r): precomputed_route(model, r) for r in range(ctx)})
    torch.save(ref, f"{out_dir}/ref.pt")
    sys.exit(0)

if "TRTLLM_DWDP_RANK" in os.environ:  # a rendezvous launch: one single-GPU trtllm-serve per context rank, no MPI
    rank = int(os.environ["TRTLLM_DWDP_RANK"])
else:
    from mpi4py import MPI  # noqa: E402
    from tensorrt_llm.llmapi.disagg_utils import split_world_comm  # noqa: E402

    rank = MPI.COMM_WORLD.Get_rank()
    split_world_comm([1] * ctx + [1] * gen)  # TP1 instances, context first
    if rank >= ctx:
        sys.exit(0)  # generation server: never calls into DWDP


LOG: list[str] = []  # the integration's log lines of level INFO and above, "LEVEL: message"


class _Keep(logging.Handler):
    def emit(self, record):
        LOG.append(f"{record.levelname}: {record.getMessage()}")


logging.getLogger("dwdp_trtllm").addHandler(_Keep(logging.INFO))
logging.getLogger("dwdp_trtllm").setLevel(logging.INFO)


def shm_state(tag):
    """What of the transport `tag` is left: /proc/self/maps lines mapping its /dev/shm segments, files of it there."""
    with open("/proc/self/maps") as f:
        maps = [ln.split(None, 5)[-1].strip() for ln in f if f"/dev/shm/{tag}_" in ln]
    return {"maps": maps, "files": sorted(glob.glob(f"/dev/shm/{tag}_*"))}


_ctx: list = []


def ctx_barrier():
    """Barrier of the context ranks (fake MPI communicator of world ranks 0..ctx-1, made on first use by all)."""
    if not _ctx:
        _ctx.append(MPI.COMM_WORLD.Create_group(MPI.COMM_WORLD.group.Incl(list(range(ctx)))))
    _ctx[0].barrier()


def exported_bytes(transport):
    """Device bytes this rank's transport allocated for its exported buffers (vmm: cuMemCreate's padded sizes; ipc:
    cudaMalloc's sizes)."""
    if transport.kind.startswith("vmm"):
        return sum(padded for _, _, padded in transport._own.values())
    return sum(max(n, 1) for n in transport._sizes.values())


#: the longest a rank waits for a peer's step (a bound against a broken test, never a pace: steps are ordered by files)
WAIT_S = 300.0


def wait_for_file(path):
    """The content of `path` once it exists (the peers order their steps by files, not by sleeps: a loaded machine
    only makes the wait longer)."""
    t0 = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t0 > WAIT_S:
            raise TimeoutError(f"{path} not written within {WAIT_S:g} s")
        time.sleep(0.02)
    with open(path) as f:
        return f.read()


def wait_gone(pid):
    """Until process `pid` has exited (a pidfd turns readable; a zombie counts as gone, as for PeerWatch)."""
    import select
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if not select.select([fd], [], [], WAIT_S)[0]:
            raise TimeoutError(f"pid {pid} still alive after {WAIT_S:g} s")
    finally:
        os.close(fd)


def serve_one():
    """One model's life: build, FAKE_STEPS forwards, a refused reload, executor shutdown; what the test checks."""
    model, ex = build()
    info = model._dwdp_trtllm_runtime
    default_world = torch.distributed.is_initialized()  # our DWDP group is private: TensorRT-LLM's stays untouched
    outs, errors, capture_refused = {}, {}, None
    die = os.environ.get("FAKE_DIE_AFTER_FORWARD")  # "rank:n": that rank exits after its n-th forward
    die_rank, die_n = map(int, die.split(":")) if die else (-1, -1)
    marker = f"{out_dir}/died_{die_rank}"
    for s in range(steps):
        if die and rank != die_rank and s == die_n:  # the survivors go on once the peer is gone
            wait_gone(int(wait_for_file(marker)))
        t0 = time.monotonic()
        try:
            outs[(rank, s)] = step(model, ex, rank, s)
        except Exception as e:  # noqa: BLE001 - a lost peer: the forward's error is what the test checks
            errors[s] = {"type": type(e).__name__, "message": str(e), "seconds": time.monotonic() - t0}
        if die:
            open(f"{out_dir}/forward_{rank}_{s}", "w").close()  # the dying rank leaves only after this (below)
        if s == 0 and os.environ.get("FAKE_CAPTURE") == "1":  # CUDA: capture a graph around one DWDP layer
            capture_refused = capture_moe_layer(model, inputs(rank, 0))
        if rank == die_rank and s + 1 == die_n:  # a peer that dies while serving: no shutdown, no close
            torch.save({"died_after_forward": die_n, "outs": outs}, f"{out_dir}/out_{rank}.pt")
            for r in range(ctx):  # every survivor finished the same forward: none of it ran without us
                if r != rank:
                    wait_for_file(f"{out_dir}/forward_{r}_{s}")
            with open(marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(marker + ".tmp", marker)
            os._exit(0)
    from tensorrt_llm._torch.models.modeling_tiny import tiny_checkpoint
    from tensorrt_llm.llmapi.rlhf_utils import update_weights
    # identity and storage, not values: our prefetch may still be filling the slots the expert tensors view
    params = [(n, p, p.data_ptr()) for n, p in model.named_parameters()]
    try:  # upstream's weight update (preflight, destructive walk, reload), with the tiny checkpoint: refused
        update_weights(model, build.loader, tiny_checkpoint(8, None if quant == "bf16" else quant))
        update_refused = None
    except NotImplementedError as e:
        update_refused = str(e)
    now = dict(model.named_parameters())
    weights_changed = [n for n, p, ptr in params if now.get(n) is not p or p.data_ptr() != ptr]
    try:  # a weight update straight through the loader (dwdp_trtllm refuses it as well)
        build.loader.reload(model, tiny_checkpoint(8, None if quant == "bf16" else quant))
        reload_refused = None
    except RuntimeError as e:
        reload_refused = str(e)
    try:  # a top-k computed elsewhere, through ConfigurableMoE.forward_precomputed_route (bound by dwdp_trtllm)
        precomputed_out, precomputed_refused = precomputed_route(model, rank), None
    except Exception as e:  # noqa: BLE001 - a lost peer (dead-peer worlds) fails it too: the test reads what was raised
        precomputed_out, precomputed_refused = None, f"{type(e).__name__}: {e}"
    tag = info["transport"].tag
    shm_before = shm_state(tag)
    delay = dict(tuple(map(float, d.split(":"))) for d in os.environ.get("FAKE_SHUTDOWN_DELAY", "").split(",") if d)
    after = dict(tuple(map(int, d.split(":"))) for d in os.environ.get("FAKE_SHUTDOWN_AFTER", "").split(",") if d)
    if rank in delay:  # a slow peer: its shutdown comes that long after every other context rank's began
        for r in range(ctx):
            if r != rank:
                wait_for_file(f"{out_dir}/shutdown_called_{r}")
        time.sleep(delay[rank])  # the lateness itself (the order is the files')
    if rank in after:  # an absent peer: its shutdown comes only after that peer's returned (its barrier gave up)
        wait_for_file(f"{out_dir}/shutdown_done_{after[rank]}")
    if str(rank) == os.environ.get("FAKE_SHUTDOWN_DIE"):  # a dead peer: gone before its executor shuts down
        torch.save({"died_before_shutdown": True}, f"{out_dir}/out_{rank}.pt")
        os._exit(0)
    memory = None
    if os.environ.get("FAKE_MEASURE_MEMORY") == "1":  # CUDA: device memory around every context rank's shutdown
        torch.cuda.synchronize()
        ctx_barrier()  # every rank done computing: nobody frees anything between here and the next barrier
        memory = {"kind": info["transport"].kind, "exported_bytes": exported_bytes(info["transport"]),
                  "free_before": torch.cuda.mem_get_info()[0]}
        ctx_barrier()
    if str(rank) == os.environ.get("FAKE_HANG"):  # a hung executor: a forward still running, its hang detector fired
        ex.worker_thread = threading.Thread(target=threading.Event().wait, args=(60,), daemon=True)
        ex.worker_thread.start()
        ex.hang_detector.fire()
    shutdown_called_at = time.time()
    open(f"{out_dir}/shutdown_called_{rank}", "w").close()
    ex.shutdown()  # our PyExecutor.shutdown wrap exits the manager: runtime closed (transport too), unregistered
    open(f"{out_dir}/shutdown_done_{rank}", "w").close()
    if memory is not None:
        ctx_barrier()  # every rank shut down: imported VMM handles (which keep an exporter's pages) released too
        memory["free_after"] = torch.cuda.mem_get_info()[0]
    rt = info["runtime"]
    close_info = getattr(rt, "close_info", None)  # None: a runtime that records no close (before the barrier)
    barrier = close_info["barrier"] if close_info else None
    dwdp = sys.modules.get("tensorrt_llm._torch.pyexecutor.dwdp")
    return info["manager"], {
        "shm_before_shutdown": shm_before, "shm_after_shutdown": shm_state(tag),
        "transport_buffers_after": len(info["transport"].local) + len(getattr(info["transport"], "_peer_maps", [])),
        "expert_numel_after": [getattr(o, n).numel() for o in rt.owners for n in rt.names],
        "shutdown_called_at": shutdown_called_at,
        "released_at": close_info["released_at"] if close_info else None,
        "barrier_entered_at": close_info["entered_at"] if close_info else None,
        "barrier_missing": None if barrier is None else dict(barrier.missing),
        "barrier_waited_s": None if barrier is None else barrier.waited_s,
        "barrier_skipped": None if barrier is None else barrier.skipped, "shutdown_s": time.time() - shutdown_called_at,
        "log": list(LOG), "memory": memory,
        "outs": outs, "errors": errors, "default_world_after_setup": default_world, "lifecycle": info["lifecycle"], "gemm": info["gemm"], "gemm_reason": info["gemm_reason"],
        "unit_calls": [u.calls for u in info["units"]], "misses": info["runtime"].prefetcher.misses,
        "layer_ids": sorted(info["manager"]._pos, key=info["manager"]._pos.get), "trace": list(info["hooks"].trace) if info["hooks"] else None,
        "closed_at_shutdown": info["manager"].closed and info["runtime"]._closed, "reload_refused": reload_refused,
        "update_refused": update_refused, "weights_changed_by_refused_update": weights_changed,
        "precomputed_refused": precomputed_refused, "precomputed_out": precomputed_out, "capture_refused": capture_refused,
        "global_after_shutdown": None if dwdp is None else repr(dwdp.get_global_dwdp_manager())}


# FAKE_MODELS > 1: further models built in the same process after the previous executor shut down (LLM API style)
managers, saved = [], []
for _ in range(int(os.environ.get("FAKE_MODELS", "1"))):
    mgr, got = serve_one()
    got["new_manager"] = all(mgr is not m for m in managers)
    managers.append(mgr)
    saved.append(got)
torch.save({**saved[0], "later_models": saved[1:]}, f"{out_dir}/out_{rank}.pt")
