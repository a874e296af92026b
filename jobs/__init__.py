"""The launcher, on the login node: CLI, recipe composition, planning, recording, executors, and the
commands that answer queries. What runs inside the allocation is runtime/."""
