"""`dwdp bench`: config-driven context-phase benchmark of DWDP against DEP on the embedded engine.

workload (requests per rank) -> engine.launcher.run_mode per mode -> metrics -> report/plots;
sweep expands list-valued config keys; runner ties them together and resumes interrupted sweeps.
"""
