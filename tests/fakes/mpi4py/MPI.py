"""Fake MPI whose collectives need every member of the communicator, across real processes.

Semantics mirrored from the MPI standard as mpi4py exposes it (what TensorRT-LLM relies on):
- Comm.Split(color, key) (MPI_Comm_split) is collective over ALL ranks of the communicator;
  disagg_utils.split_world_comm (TensorRT-LLM llmapi/disagg_utils.py @ 0228a7122341) calls it once on every rank of
  COMM_WORLD, context and generation servers alike.
- Comm.Create_group(group) (MPI_Comm_create_group) is collective over the members of `group` only;
  upstream DwdpManager._init_dwdp_group (tensorrt_llm/_torch/pyexecutor/dwdp.py @ 198af04538bc) uses it.
- bcast / allgather / barrier are collective over the communicator.
A collective that some member never joins raises TimeoutError after FAKE_MPI_TIMEOUT seconds (default 20),
naming the communicator, the call and the missing ranks: a test fails, it never hangs.

Rendezvous: one pickle file per (communicator, call number, world rank) in FAKE_MPI_DIR. World rank and
size come from OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE, as under mpirun.
"""
from __future__ import annotations

import os
import pickle
import time

UNDEFINED = -32766


def _dir() -> str:
    d = os.environ["FAKE_MPI_DIR"]
    os.makedirs(d, exist_ok=True)
    return d


def _timeout() -> float:
    return float(os.environ.get("FAKE_MPI_TIMEOUT", "20"))


class Group:
    def __init__(self, members):
        self.members = tuple(members)  # world ranks, in group-rank order

    def Incl(self, ranks):
        return Group([self.members[r] for r in ranks])

    def Get_size(self):
        return len(self.members)


class Comm:
    def __init__(self, name: str, members, world_rank: int):
        self.name, self.members, self._me = name, tuple(members), world_rank
        self._calls = 0
        self._sub: dict = {}

    # -- introspection ------------------------------------------------------------------------
    def Get_rank(self):
        return self.members.index(self._me)

    def Get_size(self):
        return len(self.members)

    @property
    def group(self):
        return Group(self.members)

    # -- the one primitive: every member deposits, every member reads all -----------------------
    def _exchange(self, what: str, obj, members=None, name=None):
        members = self.members if members is None else members
        name = self.name if name is None else name
        if name == self.name:
            self._calls += 1
            call = self._calls
        else:
            self._sub[name] = call = self._sub.get(name, 0) + 1
        stem = os.path.join(_dir(), f"{name}.{call}")
        tmp = f"{stem}.{self._me}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump((what, obj), f)
        os.replace(tmp, f"{stem}.{self._me}")
        deadline = time.monotonic() + _timeout()
        out = {}
        while len(out) < len(members):
            for r in members:
                if r not in out and os.path.exists(f"{stem}.{r}"):
                    with open(f"{stem}.{r}", "rb") as f:
                        got_what, got = pickle.load(f)
                    if got_what != what:
                        raise RuntimeError(f"fake MPI {name} call {call}: rank {self._me} called {what}, "
                                           f"world rank {r} called {got_what}")
                    out[r] = got
            if len(out) < len(members):
                if time.monotonic() > deadline:
                    missing = [r for r in members if r not in out]
                    raise TimeoutError(f"fake MPI: {what} on {name} (call {call}) not joined by world ranks "
                                       f"{missing} within {_timeout()} s (a collective that not all members make)")
                time.sleep(0.005)
        return [out[r] for r in members]

    # -- collectives ---------------------------------------------------------------------------
    def Split(self, color=0, key=0):
        got = self._exchange("Split", (color, key))
        call = self._calls
        if color == UNDEFINED:
            return COMM_NULL
        mine = sorted((k, r) for (c, k), r in zip(got, self.members) if c == color)
        return Comm(f"{self.name}.s{call}c{color}", [r for _, r in mine], self._me)

    def Create_group(self, group, tag=0):
        if self._me not in group.members:
            raise RuntimeError(f"fake MPI: world rank {self._me} called Create_group for a group it is not in")
        name = f"{self.name}.g{'-'.join(map(str, group.members))}t{tag}"
        self._exchange("Create_group", None, members=group.members, name=name)
        n = self._sub[name]
        return Comm(f"{name}n{n}", group.members, self._me)

    def bcast(self, obj=None, root=0):
        return self._exchange("bcast", obj if self.Get_rank() == root else None)[root]

    def allgather(self, obj):
        return self._exchange("allgather", obj)

    def barrier(self):
        self._exchange("barrier", None)

    Barrier = barrier

    def Free(self):
        pass


class _Null:
    def __bool__(self):
        return False


COMM_NULL = _Null()
COMM_WORLD = Comm("world", range(int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))),
                  int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
