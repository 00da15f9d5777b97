"""Shared test setup: one torch thread (2-core CI machines: OpenMP spin-waits cost more than they give)."""
import torch

torch.set_num_threads(1)
