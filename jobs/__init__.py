"""The launcher, on the login node: the CLI, recipe composition, planning, the executors that submit
a run, and the commands that query the store. What runs inside the allocation is runtime/."""
