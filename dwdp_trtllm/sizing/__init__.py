"""`dwdp size`: traffic, a discrete-event simulation of a disaggregated deployment, its search and report."""
