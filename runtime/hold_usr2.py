"""The job's first Python lines: hold Slurm's USR2 until submitit has a handler for it.

Slurm may send USR2 (a preemption, or the time limit's warning, which with a short limit comes
within the job's first seconds) before the interpreter has imported submitit and installed its
handler; USR2's default action then kills the job (exit 12) instead of requeueing it. Blocked here,
before any import, the signal stays pending: `StageJob.__call__` unblocks it once submitit's handler
is in place, and it is delivered then. A blocked mask survives exec and is inherited by threads.

The Slurm executor names `python -u -m runtime.hold_usr2` as submitit's interpreter, so the job's
command reads `python -u -m runtime.hold_usr2 -u -m submitit.core._submit FOLDER` (in a container,
runtime.bootstrap, which imports this module first).

A job under Charliecloud inherits USR2 *ignored*: ch-run stays alive as the squashfs's FUSE server
and must not die of the signal Slurm sends every process of the step, so the executor starts it
with USR2 ignored. Once blocked here, the default action is restored: a blocked signal stays
pending whatever its action, and from here on the job behaves as one started without ch-run.
"""
import signal

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
signal.signal(signal.SIGUSR2, signal.SIG_DFL)


def main(argv: list[str]) -> None:
    """Run `-m MODULE ARGS...` (what submitit appends; its `-u` is ours already) as __main__."""
    import runpy
    import sys

    args = list(argv)
    while args[:1] == ["-u"]:
        args.pop(0)
    if len(args) < 2 or args[0] != "-m":
        raise SystemExit(f"usage: python -m runtime.hold_usr2 [-u] -m MODULE [ARGS...] (got {argv})")
    sys.argv = args[1:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
