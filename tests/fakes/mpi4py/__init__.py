"""Fake mpi4py for CPU tests of the TensorRT-LLM integration (put tests/fakes first on PYTHONPATH).

Only `from mpi4py import MPI` is provided; see MPI.py for the semantics it enforces.
"""
