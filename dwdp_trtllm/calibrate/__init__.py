"""`dwdp calibrate`: measure on the user's node what the planner assumes and write one calibration file
(docs/CALIBRATION.md; the file format is perf/calibration.py + perf/calibration_detail.py).

machine.py (what it ran on), copy_timer.py (peer pulls through the CopyScheduler), peer.py (pair, sliced,
many-to-one and whole-group pulls), interference.py (copies beside each compute phase), kernels.py (one GPU's
kernels at the planned shapes), dep_comm.py (DEP's dispatch all-to-all), pipeline.py (the steps, priors, progress
and the atomic write).
"""
