"""Which node each server of a deployment runs on (pure): the MPI world laid out over nodes of N GPUs.

Servers are placed in MPI rank order (context servers first, then generation servers: the order in which
`trtllm-serve disaggregated_mpi_worker` splits its world), each on the current node when its GPUs still fit
there, else at the start of the next node, so no server of <= N GPUs straddles two nodes; a server larger
than a node takes whole nodes (as upstream's examples/disaggregated/slurm/gen_yaml.py checks: an instance
uses no more nodes than it needs). A node then runs as many ranks as its servers hold GPUs: the hostfile
gives it that many slots, so mpirun's by-slot mapping puts every rank where this layout says.
"""
from __future__ import annotations

from dataclasses import dataclass

#: host name written where the user (or the slurm script) puts node i's real name
PLACEHOLDER = "NODE{}_HOST"


@dataclass(frozen=True, slots=True)
class Server:
    role: str  # context | generation | aggregated
    index: int  # within its role
    gpus: int
    first_rank: int
    node: int  # the node of its first rank


@dataclass(frozen=True, slots=True)
class NodeLayout:
    gpus_per_node: int
    servers: tuple[Server, ...]
    ranks_per_node: tuple[int, ...]

    @property
    def num_gpus(self) -> int:
        return sum(self.ranks_per_node)

    @property
    def num_nodes(self) -> int:
        return len(self.ranks_per_node)

    def summary(self) -> str:
        """'16 GPUs on 2 nodes' (the first line gen-config prints)."""
        n = self.num_nodes
        return f"{self.num_gpus} GPU{'s' * (self.num_gpus != 1)} on {n} node{'s' * (n != 1)}"

    def hosts(self, names: tuple[str, ...] | None) -> tuple[str, ...]:
        """Host of every node: `names` (at least one per node), else NODE<i>_HOST placeholders."""
        if names is None:
            return tuple(PLACEHOLDER.format(i) for i in range(self.num_nodes))
        if len(names) < self.num_nodes:
            raise ValueError(f"{len(names)} host(s) given for {self.num_nodes} nodes")
        return tuple(names[: self.num_nodes])

    def hostfile(self, hosts: tuple[str, ...]) -> str:
        """Open MPI hostfile: each node with exactly the slots (ranks) this layout gives it."""
        return "".join(f"{h} slots={k}\n" for h, k in zip(hosts, self.ranks_per_node))

    def local_gpus(self, server: Server) -> range:
        """The node-local GPU indices of a server within one node (its CUDA_VISIBLE_DEVICES when each server is
        started on its own, as a rendezvous launch does); ValueError for a server spanning nodes."""
        if server.gpus > self.gpus_per_node:
            raise ValueError(f"the {server.role} server {server.index} of {server.gpus} GPUs spans nodes of "
                             f"{self.gpus_per_node} GPUs")
        first = server.first_rank - sum(self.ranks_per_node[:server.node])
        return range(first, first + server.gpus)

    def node_lines(self, hosts: tuple[str, ...]) -> list[str]:
        """One line per node: its host, GPUs used and servers (what runs where)."""
        lines = []
        for i, h in enumerate(hosts):
            runs: list[list[Server]] = []  # consecutive servers of one role and size, shown as one range
            for s in (s for s in self.servers if s.node == i):
                if runs and (runs[-1][-1].role, runs[-1][-1].gpus) == (s.role, s.gpus):
                    runs[-1].append(s)
                else:
                    runs.append([s])
            what = ", ".join(_describe(r) for r in runs) or "the rest of the server before"
            lines.append(f"node {i} ({h}): {self.ranks_per_node[i]} of {self.gpus_per_node} GPUs: {what}")
        return lines


def _describe(run: list[Server]) -> str:
    a, b = run[0], run[-1]
    which = f"{a.role} server {a.index}" if a is b else f"{a.role} servers {a.index}-{b.index}"
    each = " each" if a is not b else ""
    return f"{which} ({a.gpus} GPU{'s' * (a.gpus != 1)}{each}, ranks {a.first_rank}-{b.first_rank + b.gpus - 1})"


def layout(servers: list[tuple[str, int]], gpus_per_node: int) -> NodeLayout:
    """Lay out (role, gpus) servers in rank order over nodes of `gpus_per_node` GPUs (module docstring).

    A server larger than a node must be a whole number of nodes (ValueError otherwise)."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    ranks: list[int] = [0]
    placed: list[Server] = []
    counts: dict[str, int] = {}
    rank = 0
    for role, gpus in servers:
        if gpus < 1:
            raise ValueError(f"a {role} server needs >= 1 GPU, got {gpus}")
        if gpus > gpus_per_node and gpus % gpus_per_node:
            raise ValueError(f"{'an' if role[0] in 'aeiou' else 'a'} {role} server of {gpus} GPUs spans nodes of {gpus_per_node} GPUs unevenly: "
                             f"use a multiple of {gpus_per_node}")
        if ranks[-1] and (ranks[-1] + gpus > gpus_per_node):
            ranks.append(0)  # does not fit the rest of this node: start the next one
        node = len(ranks) - 1
        left = gpus
        while left:
            take = min(left, gpus_per_node - ranks[-1])
            ranks[-1] += take
            left -= take
            if left:
                ranks.append(0)
        idx = counts.get(role, 0)
        counts[role] = idx + 1
        placed.append(Server(role, idx, gpus, rank, node))
        rank += gpus
    return NodeLayout(gpus_per_node, tuple(placed), tuple(ranks))
