"""HopperDwdpManager contract (upstream's DwdpManager interface) over a stub runtime: layer ids map to
positions, a forward that stops part-way is refused at the next forward start, a module that does not own
the layer's weights is refused, add_layer ignores duplicates like upstream (dwdp.py, stored id 56230681187)."""
import pytest
import torch

from dwdp_trtllm.config import DwdpConfig
from dwdp_trtllm.integration.manager import DwdpOrderError, HopperDwdpManager


class _StubRuntime:
    def __init__(self, owners):
        self.owners, self.num_layers, self.calls = owners, len(owners), []
        self.prefetcher = type("P", (), {"n": 0})()

    def at_forward_start(self):
        return self.prefetcher.n % self.num_layers == 0

    def wait_and_bind(self, pos):
        self.calls.append(("bind", pos))

    def release(self, pos):
        self.calls.append(("release", pos))
        self.prefetcher.n += 1


def _manager(L=3):
    owners = [torch.nn.Linear(2, 2) for _ in range(L)]
    rt = _StubRuntime(owners)
    m = HopperDwdpManager(DwdpConfig(dwdp_size=2), dwdp_rank=1)
    for lid in (3, 4, 4, 5):
        m.add_layer(lid)
    m.attach(rt, [3, 4, 5], "upstream")
    return m, rt, owners


def test_layer_ids_drive_positions_and_a_partial_forward_is_refused():
    m, rt, owners = _manager()
    assert m._registered_layers == [3, 4, 5] and m.dwdp_rank == 1 and m.is_enabled()
    m.prefetch_first_layers()
    wrapper = torch.nn.Sequential(owners[0])  # ConfigurableMoE passes its backend; a parent is accepted too
    m.wait_and_bind(wrapper, 3)
    m.record_compute_and_prefetch_next(3)
    assert rt.calls == [("bind", 0), ("release", 0)]
    with pytest.raises(DwdpOrderError, match="stopped after MoE position 0"):
        m.prefetch_first_layers()  # layers 4, 5 never ran
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
