"""Deployment facts: memory per rank, node layout, this machine's free resources, output paths."""
