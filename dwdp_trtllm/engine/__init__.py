"""Embedded context-phase engine: reference model, DEP baseline, DWDP executor, launcher."""
