"""What runs inside the allocation: the job's entry point, its Ray cluster, its attempts.

The launcher (jobs/) pickles `runtime.entry.StageJob` for submitit; nothing here imports jobs/.
"""
