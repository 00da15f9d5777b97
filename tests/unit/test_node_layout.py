"""node_layout: servers packed over nodes in MPI rank order, never straddling a node unless a whole multiple."""
import pytest

from dwdp_trtllm.deploy.node_layout import layout


def test_context_then_generation_on_two_nodes():
    n = layout([("context", 1)] * 8 + [("generation", 8)], 8)
    assert (n.num_gpus, n.num_nodes, n.ranks_per_node, n.summary()) == (16, 2, (8, 8), "16 GPUs on 2 nodes")
    assert [s.node for s in n.servers] == [0] * 8 + [1] and n.servers[-1].first_rank == 8
    assert n.hosts(None) == ("NODE0_HOST", "NODE1_HOST") and n.hostfile(("a", "b")) == "a slots=8\nb slots=8\n"


def test_a_server_that_does_not_fit_the_rest_of_a_node_starts_the_next():
    n = layout([("context", 1)] * 4 + [("generation", 8), ("generation", 2)], 8)
    assert n.ranks_per_node == (4, 8, 2) and [s.node for s in n.servers][-2:] == [1, 2]
    assert n.node_lines(("x", "y", "z"))[0] == "node 0 (x): 4 of 8 GPUs: context servers 0-3 (1 GPU each, ranks 0-3)"
    one = layout([("context", 1)] * 4 + [("generation", 4)], 8)
    assert (one.summary(), one.ranks_per_node) == ("8 GPUs on 1 node", (8,))


def test_server_larger_than_a_node():
    n = layout([("context", 1), ("generation", 16)], 8)
    assert n.ranks_per_node == (1, 8, 8) and n.servers[1].node == 1
    assert "the rest of the server before" in n.node_lines(("a", "b", "c"))[2]
    with pytest.raises(ValueError, match="unevenly"):
        layout([("generation", 12)], 8)
    with pytest.raises(ValueError, match=r"2 host\(s\) given for 3 nodes"):
        n.hosts(("a", "b"))
