"""A run's results where people look: its metrics summary (the last value of each metric it logged),
how long it ran and when it ended; used by `list`, `show --json`, `diff` and `compare`."""
from __future__ import annotations

import re

from jobs.errors import JobsError

#: Measures of speed or time (tokens per second, seconds spent): they differ between two runs of the
#: same code, config and inputs, so they are shown but never make two runs "differ".
TIMING = re.compile(r"(_per_s|_s|tok/s|_seconds|_time)$")


def timing(key: str) -> bool:
    return bool(TIMING.search(key))


def facts(view) -> dict:
    """metrics, duration_s (time running, all attempts together) and ended (the last attempt's end)."""
    spans = [(a.get("start"), a.get("end")) for a in view.attempts]
    done = [(s, e) for s, e in spans if isinstance(s, (int, float)) and isinstance(e, (int, float))]
    return {"metrics": dict(view.metrics),
            "duration_s": round(sum(e - s for s, e in done), 3) if done else None,
            "ended": max(e for _, e in done) if done and view.state in ("SUCCEEDED", "FAILED", "CANCELLED") else None}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes}m{s:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def number(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else ("-" if x is None else str(x))


def check_known(name: str, summaries: list[dict]) -> None:
    """A metric no run here has is a typo, not an empty column: refuse it, naming the known ones."""
    known = sorted({k for m in summaries for k in m})
    if name not in known:
        import difflib

        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise JobsError(f"no run listed has metric {name!r}{hint} (metrics: {', '.join(known) or 'none'})")


def deltas(a: dict, b: dict) -> list[tuple[str, bool]]:
    """`metric KEY: A -> B (+D)` for every metric that differs, and whether it counts as a difference
    (timing measures do not)."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x == y:
            continue
        moved = f" ({y - x:+.4g})" if _num(x) and _num(y) else ""
        note = "  (timing: not counted)" if timing(k) else ""
        out.append((f"metric  {k}: {number(x) if k in a else '<none>'} -> {number(y) if k in b else '<none>'}{moved}{note}",
                    not timing(k)))
    return out


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
