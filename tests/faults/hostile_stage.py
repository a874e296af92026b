"""A stage that plants in its output what an artifact must not hold: `plant.what` next to a normal file.

symlink / dirlink / hardlink point at `plant.target` (outside the store); fifo and socket are made in place.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path


def run(ctx) -> dict[str, Path]:
    cfg = ctx.config["plant"]
    out = ctx.output_dir("result")
    (out / "ok.txt").write_text("fine\n")
    sub = out / "sub"
    sub.mkdir()
    (sub / "also.txt").write_text("fine too\n")
    planted = sub / "planted"
    if cfg["what"] in ("symlink", "dirlink"):
        os.symlink(cfg["target"], planted)
    elif cfg["what"] == "hardlink":
        os.link(cfg["target"], planted)
    elif cfg["what"] == "fifo":
        os.mkfifo(planted)
    elif cfg["what"] == "socket":
        here = os.getcwd()
        os.chdir(sub)  # a socket path is limited to ~108 bytes: bind by its short relative name
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind("planted")
            s.close()
        finally:
            os.chdir(here)
    return {"result": out}
