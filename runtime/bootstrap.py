"""How a job starts inside an image that is not ours: hold USR2, add the runtime bundle, check the image.

A container job runs `python3 -u -m runtime.bootstrap -u -m submitit.core._submit FOLDER` with the
code snapshot on PYTHONPATH. Before anything else (runtime.hold_usr2, imported first) Slurm's USR2
is held; then the runtime bundle ($JOBS_RUNTIME_BUNDLE: submitit and what it imports, pure Python)
is appended to sys.path, after the image's own site-packages, so a library the image already has
(typing_extensions, say, which torch needs at its own version) is the image's. Then submitit runs.

What the stage itself needs from the image is checked later, by runtime.image.check_image.
"""
import runtime.hold_usr2  # noqa: F401  (first: blocks USR2 before any other import)

import os
import sys

from runtime.image import BUNDLE_ENV, missing

#: What the bundle must provide for submitit to start and unpickle the job.
BUNDLED = ("submitit", "cloudpickle", "typing_extensions")


def use_bundle() -> str | None:
    """Append the runtime bundle to sys.path (after the image's site-packages); its path."""
    path = os.environ.get(BUNDLE_ENV)
    if path and path not in sys.path:
        sys.path.append(path)
    return path


def main(argv: list[str]) -> None:
    bundle = use_bundle()
    gone = missing(BUNDLED)
    if gone:
        raise SystemExit(f"jobs: cannot start: {', '.join(gone)} not in the image nor in the runtime bundle "
                         f"{bundle or f'(${BUNDLE_ENV} is not set)'}")
    runtime.hold_usr2.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
