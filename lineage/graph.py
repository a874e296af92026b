"""The lineage graph walk, written once: from artifacts (and runs) up through the runs that made
them and down through the runs that read them, over the index's edges. `jobs lineage`, `jobs show`
and `jobs report` draw what it returns."""
from __future__ import annotations


def walk(idx, arts, runs=(), *, one_producer: bool = False,
         downstream: bool = True) -> tuple[dict[str, str], set[tuple[str, str, str]]]:
    """Nodes (ID -> "run" | "art") and edges (source, target, role): the `runs`' own inputs and
    outputs, everything upstream of those inputs and of `arts`, and (unless not `downstream`)
    everything downstream of `arts`.

    With `one_producer`, an artifact made by several runs (a re-run that wrote the same bytes) shows
    one: a run in `runs` if there is one, else the newest."""
    nodes: dict[str, str] = {}
    edges: set[tuple[str, str, str]] = set()
    runs = list(runs)
    up, down = [], list(arts)
    for r in runs:
        nodes[r] = "run"
        for e in idx.edges_of(r, "in"):
            edges.add((e["artifact"], r, e["role"]))
            up.append(e["artifact"])
        for e in idx.edges_of(r, "out"):
            edges.add((r, e["artifact"], e["role"]))
            nodes[e["artifact"]] = "art"
    up += arts

    def producers(a: str) -> list[dict]:
        made = idx.producer(a)
        if one_producer:
            made = [p for p in made if p["run"] in runs] or sorted(made, key=lambda p: p["run"])[-1:]
        return made

    def follow(todo: list[str], links, across: str, upward: bool) -> None:
        """From each artifact over its runs (producers upward, consumers downward) to their other side."""
        seen: set[str] = set()
        while todo:
            a = todo.pop()
            if a in seen:
                continue
            seen.add(a)
            nodes[a] = "art"
            for link in links(a):
                run = link["run"]
                nodes[run] = "run"
                edges.add((run, a, link["role"]) if upward else (a, run, link["role"]))
                for e in idx.edges_of(run, across):
                    edges.add((e["artifact"], run, e["role"]) if upward else (run, e["artifact"], e["role"]))
                    todo.append(e["artifact"])

    follow(up, producers, "in", upward=True)
    if downstream:
        follow(down, idx.consumers, "out", upward=False)
    return nodes, edges
