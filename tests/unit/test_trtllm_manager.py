"""HopperDwdpManager contract (upstream's DwdpManager interface) over a stub runtime: layer ids map to
positions; keyed by layer as upstream (weight_manager.py @ 11eba269 next_moe_layer / buffer_index_for_layer): a
repeated layer and a forward that stops part-way are accepted, the next forward start (the first position's bind:
upstream's PyExecutor never calls prefetch_first_layers on our manager) re-primes the first layers; a bind while
another layer is bound and a record without a bind of the same layer are refused, a module that does not own the
layer's weights is refused, add_layer ignores duplicates like upstream (dwdp.py, stored id 56230681187); under CUDA
stream capture every entry point raises DwdpCaptureError."""
import pytest
import torch

from dwdp_trtllm.spec.config import DwdpConfig
from dwdp_trtllm.integration.hopper_manager import DwdpCaptureError, DwdpOrderError, HopperDwdpManager
from dwdp_trtllm.core.placement import make_placement


class _StubRuntime:
    def __init__(self, owners):
        self.owners, self.num_layers, self.calls = owners, len(owners), []
        self.bound_position = None  # AdapterRuntime: the position between wait_and_bind and release
        self.closed = False  # AdapterRuntime.closed
        self.device = torch.device("cpu")
        self.transport = type("T", (), {"group": "the model's group"})()

    def close(self):
        self.closed = True

    def begin_forward(self):
        self.calls.append(("begin",))

    def wait_and_bind(self, pos):
        self.calls.append(("bind", pos))
        self.bound_position = pos

    def release(self, pos):
        self.calls.append(("release", pos))
        self.bound_position = None


def _manager(L=3):
    owners = [torch.nn.Linear(2, 2) for _ in range(L)]
    rt = _StubRuntime(owners)
    m = HopperDwdpManager(DwdpConfig(dwdp_size=2), dwdp_rank=1)
    for lid in (3, 4, 4, 5):
        m.add_layer(lid)
    m.attach(rt, [3, 4, 5], "upstream")
    return m, rt, owners


def test_layer_ids_drive_positions_repeats_and_partial_forwards_are_accepted():
    m, rt, owners = _manager()
    assert m._registered_layers == [3, 4, 5] and m.dwdp_rank == 1 and m.is_enabled()
    m.prefetch_first_layers()
    wrapper = torch.nn.Sequential(owners[0])  # ConfigurableMoE passes its backend; a parent is accepted too
    m.wait_and_bind(wrapper, 3)
    m.record_compute_and_prefetch_next(3)
    assert rt.calls == [("begin",), ("begin",), ("bind", 0), ("release", 0)]
    m.prefetch_first_layers()  # layers 4, 5 never ran: a skipped tail, re-primed
    for _ in range(3):  # the MTP layer (last position) once per draft step
        m.wait_and_bind(owners[2], 5)
        m.record_compute_and_prefetch_next(5)
    assert rt.calls[-7:] == [("begin",)] + [("bind", 2), ("release", 2)] * 3
    with pytest.raises(RuntimeError, match="does not own"):
        m.wait_and_bind(owners[2], 4)
    with pytest.raises(DwdpOrderError, match="not a DWDP MoE layer"):
        m.record_compute_and_prefetch_next(7)


def test_setup_before_attach_names_the_missing_step():
    m = HopperDwdpManager(DwdpConfig(dwdp_size=2), dwdp_rank=0)
    with pytest.raises(RuntimeError, match="ModelLoader.load"):
        m.setup(torch.nn.Linear(1, 1))
    with pytest.raises(RuntimeError, match="before the runtime was attached"):
        m.prefetch_first_layers()


def test_forward_start_is_the_first_bind_without_prefetch_first_layers():
    """Upstream's PyExecutor calls prefetch_first_layers() only on the manager py_executor_creator made (py_executor.py
    stored id 54965565749; DWDP blog id 51853955518): ours sees only ConfigurableMoE's wait_and_bind / record calls,
    so the bind of the first MoE position re-primes, whatever the previous forward ran."""
    m, rt, owners = _manager()
    for lid, o in zip((3, 4, 5), owners):  # one whole forward
        m.wait_and_bind(o, lid)
        m.record_compute_and_prefetch_next(lid)
    m.wait_and_bind(owners[0], 3)  # next forward starts
    m.record_compute_and_prefetch_next(3)
    m.wait_and_bind(owners[0], 3)  # after a forward that ran only the first MoE layer
    assert [c for c in rt.calls if c[0] != "release"] == [("begin",), ("bind", 0), ("bind", 1), ("bind", 2),
                                                          ("begin",), ("bind", 0), ("begin",), ("bind", 0)]
    m2, rt2, owners2 = _manager()
    m2.wait_and_bind(owners2[0], 3)
    with pytest.raises(DwdpOrderError, match="still bound"):
        m2.wait_and_bind(owners2[1], 4)  # the previous layer was never released
    with pytest.raises(DwdpOrderError, match="MoE position 0 is still bound"):
        m2.prefetch_first_layers()


def test_capture_is_refused_by_name_at_every_entry_point(monkeypatch):
    """Under CUDA stream capture (torch.cuda.is_current_stream_capturing) a DWDP layer would bake its slot choice and
    event waits into the graph and capture its prefetch copies instead of running them: every entry point refuses,
    naming what to set; nothing reaches the runtime. The real capture runs in tests/gpu/test_trtllm_capture_cuda.py."""
    m, rt, owners = _manager()
    rt.device = torch.device("cuda", 0)  # only the device's type is read; nothing is allocated
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for call in (m.prefetch_first_layers, lambda: m.wait_and_bind(owners[0], 3),
                 lambda: m.record_compute_and_prefetch_next(3)):
        with pytest.raises(DwdpCaptureError, match=r"cannot run inside a captured graph.*cuda_graph_config: null"):
            call()
    assert rt.calls == []
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    m.wait_and_bind(owners[0], 3)
    assert rt.calls == [("begin",), ("bind", 0)]


def test_upstream_newer_manager_fields():
    """What upstream's newer DwdpManager carries and forwards to setup_dwdp (modules/dwdp/setup.py @ 4d994fe4:
    num_experts_per_worker, num_prefetch_experts, comm=dwdp_group; upstream's unit test of it, stored id
    56154827357, reads mgr.dwdp_group and the counts): rank (global), num_prefetch_experts (upstream form, or the uniform split our
    derived placement translates to), num_experts_per_worker, dwdp_group (the model's group once set up)."""
    from dwdp_trtllm.integration.trtllm.moe_layout import layout_attrs
    cfg = DwdpConfig(dwdp_size=4, num_groups=2, num_experts_per_worker=6, num_prefetch_experts=4)
    m = HopperDwdpManager(cfg, dwdp_rank=1, rank=5)
    m.use_layout(layout_attrs(make_placement(cfg, 16), 1))
    assert (m.rank, m.dwdp_rank, m.num_groups, m.num_prefetch_experts, m.num_experts_per_worker,
            m.start_expert_id) == (5, 1, 2, 4, 6, 4)
    assert m.dwdp_group is None  # before setup
    derived = DwdpConfig(dwdp_size=4)
    m2 = HopperDwdpManager(derived, dwdp_rank=2)
    m2.use_layout(layout_attrs(make_placement(derived, 16), 2))
    assert (m2.rank, m2.num_prefetch_experts, m2.num_experts_per_worker, m2.start_expert_id) == (2, 4, 4, 8)
    m3, rt, _ = _manager()
    assert m3.dwdp_group == "the model's group"


def test_record_without_bind_is_refused():
    """An upstream whose ConfigurableMoE.forward_impl only records (IPC era: the weight view is built in the
    scheduler for CuteDslFusedMoE only, moe_scheduler.py stored id 52297624341) must not run on unbound weights."""
    m, rt, owners = _manager()
    with pytest.raises(DwdpOrderError, match="without wait_and_bind"):
        m.record_compute_and_prefetch_next(3)
    assert rt.calls == []


def test_the_bound_position_is_the_runtimes():
    """One record of what is bound: AdapterRuntime.bound_position (it also hands multi_buffer sources for that
    position only); the manager reads it instead of keeping its own."""
    m, rt, owners = _manager()
    assert not hasattr(m, "_bound")
    m.wait_and_bind(owners[0], 3)
    m.record_compute_and_prefetch_next(3)
    rt.bound_position = 1  # bound below the manager (e.g. a bind it did not see)
    with pytest.raises(DwdpOrderError, match="MoE position 1 is still bound"):
        m.wait_and_bind(owners[2], 5)
    with pytest.raises(DwdpOrderError, match="MoE position 1 is still bound"):
        m.wait_and_bind(owners[0], 3)
    with pytest.raises(DwdpOrderError, match="without wait_and_bind"):
        m.record_compute_and_prefetch_next(5)


def test_layout_attributes_upstream_reads_come_from_our_placement():
    """What upstream MoE._init_dwdp_expert_layout (interface.py @ 581f0712) reads from the registered manager:
    num_experts_per_worker, start_expert_id, dwdp_size: plain reads of the layout moe_layout computed from our
    placement (each rank's contiguous range, overlapping ranges included: num_prefetch_experts <
    num_experts_per_worker). The contiguity check is moe_layout's alone (contiguous_range); that the manager's reads
    do not repeat it is asserted by behaviour in test_trtllm_lifecycle.test_layout_checked_once_per_moe_by_its_owner
    (contiguous_range called once per MoE, not again by the manager's reads)."""
    from dwdp_trtllm.integration.trtllm.moe_layout import layout_attrs
    cfg = DwdpConfig(dwdp_size=3, num_experts_per_worker=4, num_prefetch_experts=2)
    placement = make_placement(cfg, 8)
    for rank, start in ((0, 0), (1, 2), (2, 4)):
        m = HopperDwdpManager(cfg, dwdp_rank=rank)
        with pytest.raises(RuntimeError, match="layout was set"):
            m.num_experts_per_worker
        m.use_layout(layout_attrs(placement, rank))
        assert (m.num_experts_per_worker, m.start_expert_id, m.dwdp_size) == (4, start, 3)
        assert list(placement.local_experts[rank]) == list(range(start, start + 4))
    wrapping = DwdpConfig(dwdp_size=3, redundant_experts=1)  # derived + redundancy: rank 2 wraps around to expert 0
    with pytest.raises(ValueError, match="not one contiguous range"):
        layout_attrs(make_placement(wrapping, 8), 2)



def test_attach_refuses_a_second_runtime_while_the_first_is_open():
    """Review finding: attach replaced a live runtime silently (e.g. a retry after construction failed past
    ModelLoader.load), so the first one's exported buffers, peer mappings and prefetcher were never closed and two
    models shared one manager. Now a second runtime is refused, the first stays attached and open; once the first is
    closed (manager.cleanup(), or the runtime's own close()) a new one attaches."""
    m, rt, owners = _manager()
    rt2 = _StubRuntime([torch.nn.Linear(2, 2) for _ in range(3)])
    with pytest.raises(RuntimeError, match="still holds the open runtime of an earlier model"):
        m.attach(rt2, [3, 4, 5], "upstream")
    assert m.runtime is rt and not rt.closed and not rt2.closed
    m.cleanup()  # the first model's owner closes it
    assert rt.closed
    m.attach(rt2, [3, 4, 5], "upstream")
    assert m.runtime is rt2
    rt2.close()  # closed without the manager: replaceable too
    rt3 = _StubRuntime([torch.nn.Linear(2, 2) for _ in range(3)])
    m.attach(rt3, [3, 4, 5], "hooks")
    assert m.runtime is rt3 and m.lifecycle == "hooks"
