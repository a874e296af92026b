"""Why a job fails inside the allocation before or around its stage; the run records the one line."""


class JobFailed(Exception):
    """A job could not run its stage: the message is the run's recorded reason."""


class UpstreamFailed(JobFailed):
    """The run an input comes from did not succeed: this run is cancelled, not started."""


class CorruptInput(JobFailed):
    """An input artifact's files no longer match its manifest: the stage must not read them."""


class RayClusterError(JobFailed, RuntimeError):
    """Ray did not come up over the allocation (in time); the message is one line."""


class RetriesSpent(JobFailed):
    """A transient failure (preemption, node failure, time limit) came once more than the run's
    retry budget allows: the run fails, naming the class and the count, and is not requeued."""
