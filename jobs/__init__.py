"""The launcher: CLI, recipe composition, planning, executors and the in-allocation entry."""
