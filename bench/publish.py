"""Every number the docs publish, rendered from the raw result files under bench/results/.

    .venv/bin/python bench/publish.py                # rewrite the marked blocks of the docs
    .venv/bin/python bench/publish.py --check        # exit 1 naming each block that differs and each raw file missing
    .venv/bin/python bench/publish.py --root DIR     # the same for another checkout (tests/test_publish.py: a copy)

A published block sits between `<!-- publish:NAME -->` and `<!-- /publish:NAME -->` in README.md,
bench/README.md, recipes/*/README.md, containers/README.md or stages/backends/megatron/README.md. Its
text is what BLOCKS[NAME] renders from the raw files (bench/record.py writes them: the command,
commit, host, torch's CPU kernels, the load before and after, then the script's own output) and
from the tests' own thresholds (tests/stages/test_rl.py's MARGINS, read from its source, never
imported), so a doc cannot state a number the files or the tests do not hold. A number with no raw
file is not published.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
import textwrap
from pathlib import Path

DOCS = ("README.md", "bench/README.md", "recipes/*/README.md", "containers/README.md",
        "stages/backends/megatron/README.md")
MARK = re.compile(r"(<!-- publish:([\w-]+) -->\n)(.*?)(<!-- /publish:\2 -->)", re.S)

# The raw files the docs are rendered from. The headline: bench/tiny.py on a fresh store of the
# current code (bench/record.py tiny -- .venv/bin/python bench/tiny.py).
TINY = "tiny-2026-11-28.md"
# Every RL method and the reward model per seed: bench/rl_seeds.py at the current code, one seed a run
# (bench/record.py rl_seeds-avx512-seedS -- .venv/bin/python bench/rl_seeds.py --seeds S --workdir W).
SEED_RUNS = ("rl_seeds-avx512-seed1234-2026-11-28.md", "rl_seeds-avx512-seed7-2026-11-28.md",
             "rl_seeds-avx512-seed42-2026-11-28.md")
METHODS = SEED_RUNS[0]                            # seed 1234's, the CI pipeline's seed
TRAIN = "train-2026-11-28.md"                    # bench/train.py at the current training loop
METHOD_NAMES = {"grpo": "GRPO", "dpo": "on-policy DPO", "dpo_offline": "offline DPO",
                "grpo_rm": "GRPO on the reward model"}


class Missing(Exception):
    """A raw file a block is rendered from is not there."""


class Raw:
    """One raw result file: its `# ` header and footer lines, and the markdown tables of its output."""

    def __init__(self, root: Path, name: str):
        self.name = name
        path = root / "bench" / "results" / name
        if not path.is_file():
            raise Missing(f"bench/results/{name}")
        self.text = path.read_text()
        lines = self.text.splitlines()
        self.head = []
        for line in lines:
            if not line.startswith("#"):
                break
            self.head.append(line)
        self.tables: list[list[list[str]]] = []
        rows: list[list[str]] = []
        for line in lines + [""]:
            if line.startswith("|"):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
            elif rows:
                self.tables.append([rows[0]] + rows[2:])   # the header, then the rows (no separator)
                rows = []

    def field(self, pattern: str, where: str | None = None) -> str | None:
        m = re.search(pattern, where if where is not None else "\n".join(self.head))
        return m.group(1) if m else None

    @property
    def commit(self) -> str | None:
        return self.field(r"# commit ([0-9a-f]{7,})")

    @property
    def started(self) -> str | None:   # "2026-11-28 01:05"
        return self.field(r"started (\d{4}-\d\d-\d\d \d\d:\d\d)")

    @property
    def finished(self) -> str | None:
        return self.field(r"# finished \d{4}-\d\d-\d\d (\d\d:\d\d)", self.text)

    @property
    def host(self) -> str | None:
        return self.field(r"# host CPU: ([^;\n]*)")

    @property
    def kernels(self) -> str | None:
        return self.field(r"torch CPU capability: (\w+)")

    @property
    def note(self) -> str | None:
        return self.field(r"# note: (.*)")

    def load(self, when: str) -> float | None:
        """The 1-minute load average /proc/loadavg gave before or after, else the script's own line."""
        got = self.field(rf"# load average {when} \(/proc/loadavg\): ([\d.]+)", self.text)
        if got is None:
            got = self.field(r"load average before: ([\d.]+)" if when == "before" else r"; after: ([\d.]+)",
                             self.text)
        return float(got) if got is not None else None

    def table(self, *columns: str) -> list[dict[str, str]]:
        """The first table whose header has these columns, as rows keyed by the header."""
        for t in self.tables:
            if all(c in t[0] for c in columns):
                return [dict(zip(t[0], row)) for row in t[1:]]
        raise KeyError(f"bench/results/{self.name}: no table with the columns {columns}")


def num(x: float, places: int = 3) -> str:
    """At least `places` decimals, more where the file has them (0.9025 stays 0.9025, 0.96 is 0.960)."""
    text = f"{x:.4f}".rstrip("0")
    return text if len(text.split(".")[1]) > places else f"{x:.{places}f}"


def signed(x: float, places: int = 3) -> str:
    return f"{x:+.{places}f}"


def provenance(raw: Raw) -> str:
    """Where a raw file's numbers come from, as a sentence fragment: commit, time, host, kernels, load."""
    parts = [f"raw output `bench/results/{raw.name}`"]
    if raw.commit:
        parts.append(f"commit {raw.commit}")
    if raw.started:
        end = raw.finished if raw.finished and not raw.started.endswith(raw.finished) else None
        parts.append(f"{raw.started}{'-' + end if end else ''} UTC")
    if raw.host:
        parts.append(raw.host)
    if raw.kernels:
        parts.append(f"torch's {raw.kernels} CPU kernels")
    before, after = raw.load("before"), raw.load("after")
    if before is not None and after is not None:
        parts.append(f"load average (1 min) {before:.1f} before and {after:.1f} after")
    if raw.note:
        parts.append(raw.note)
    return "; ".join(parts)


# ---- the tiny pipeline (bench/tiny.py) ----

def tiny_numbers(root: Path) -> dict:
    raw = Raw(root, TINY)
    stages, walls = {}, {}
    for row in raw.table("stage run"):
        secs = row["seconds (RUNNING -> SUCCEEDED)"]
        name = row["stage run"]
        if name.startswith("`jobs "):
            walls[name.split("`")[1][len("jobs "):]] = int(secs)
        elif name.startswith("whole chain"):
            walls["chain"] = int(secs)
        else:
            stages.setdefault(name.split()[0], int(secs))   # the first eval is the chain's (GRPO's model)
    evals = {row["model"]: {k: float(row[c]) for k, c in (("greedy", "greedy exact match"), ("pass@1", "pass@1"),
                                                          ("pass@8", "pass@8"))}
             for row in raw.table("model")}
    rm = {row["reward model metric (held-out pairs)"]: float(row["value"])
          for row in raw.table("reward model metric (held-out pairs)")}
    return {"raw": raw, "stages": stages, "walls": walls, "evals": evals, "rm": rm}


def rl_actors(root: Path) -> str:
    """The tiny recipe's rl actors (recipes/tiny/rl.yaml's rl.cluster.actors), as the table names them."""
    m = re.search(r"^\s+actors:\s*(\w+)", (root / "recipes" / "tiny" / "rl.yaml").read_text(), re.M)
    return "Ray actors" if m and m.group(1) == "ray" else "actors in the stage's process"


def render_tiny_headline(root: Path) -> str:
    t = tiny_numbers(root)
    s, w, e, rm = t["stages"], t["walls"], t["evals"], t["rm"]
    times = ", ".join(f"{k} {s[k]} s" for k in ("data", "pretrain", "sft", "rm", "rl", "eval", "export") if k in s)
    three = lambda r: f"{num(r['greedy'])} / {num(r['pass@1'])} / {num(r['pass@8'])}"
    return (
        f"`bench/tiny.py` on a fresh store ({provenance(t['raw'])}): `jobs submit tiny --stage all` "
        f"{w['submit tiny --stage all']} s wall, CLI included; from the data record to export's end "
        f"{w['chain']} s; by stage {times}.\n\n"
        "| model | held-out metric (500 test pairs) | result |\n|---|---|---|\n"
        f"| pretrained (counting runs, one-digit sums) | exact match, greedy / pass@1 at T=1 / pass@8 | {three(e['pretrain'])} |\n"
        f"| SFT (answer-only loss, 1,000 steps) | exact match, greedy / pass@1 at T=1 / pass@8 | {three(e['sft'])} |\n"
        f"| GRPO on the SFT model (120 steps, {rl_actors(root)}) | exact match, greedy / pass@1 at T=1 / pass@8 "
        f"| **{num(e['rl (grpo)']['greedy'])}** / **{num(e['rl (grpo)']['pass@1'])}** / {num(e['rl (grpo)']['pass@8'])} |\n"
        f"| reward model (400 held-out dev pairs) | preference accuracy; its initialisation (`rm.steps=0`) "
        f"| {num(rm['rm/held_out_accuracy'])}; {num(rm['rm/init_accuracy'])} |\n")


def render_tiny_times(root: Path) -> str:
    """recipes/tiny/README.md's sentence: the same run, its stage times and held-out numbers."""
    t = tiny_numbers(root)
    s, w, e = t["stages"], t["walls"], t["evals"]
    return (
        f"`bench/tiny.py` on a fresh store ({provenance(t['raw'])}): held-out greedy / pass@1 / pass@8 of "
        f"the pretrained model {num(e['pretrain']['greedy'])} / {num(e['pretrain']['pass@1'])} / "
        f"{num(e['pretrain']['pass@8'])}, SFT {num(e['sft']['greedy'])} / {num(e['sft']['pass@1'])} / "
        f"{num(e['sft']['pass@8'])}, GRPO {num(e['rl (grpo)']['greedy'])} / {num(e['rl (grpo)']['pass@1'])} / "
        f"{num(e['rl (grpo)']['pass@8'])}; the reward model {num(t['rm']['rm/held_out_accuracy'])} of its 400 "
        f"held-out pairs (its initialisation {num(t['rm']['rm/init_accuracy'])}). Stage times at that load: "
        f"data {s['data']} s, pretrain {s['pretrain']} s (400 steps), sft {s['sft']} s (1,000 steps), rm "
        f"{s['rm']} s (300 steps, baselines included), rl {s['rl']} s (120 GRPO steps), eval {s['eval']} s, "
        f"export {s['export']} s; from the data record to export's end {w['chain']} s, the submit "
        f"{w['submit tiny --stage all']} s with the CLI.\n")


# ---- every RL method and the reward model per seed (bench/rl_seeds.py) ----

WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def seed_runs(root: Path) -> list[Raw]:
    return [Raw(root, name) for name in SEED_RUNS]


def gains(root: Path) -> dict:
    """method -> seed -> {greedy: (sft, rl, gain), pass@1: ..., pass@8: ...}."""
    out: dict = {}
    for raw in seed_runs(root):
        for row in raw.table("seed", "method", "greedy SFT -> RL"):
            cell = {}
            for k in ("greedy", "pass@1", "pass@8"):
                m = re.match(r"([\d.]+) -> ([\d.]+) \(([+-][\d.]+)\)", row[f"{k} SFT -> RL"])
                cell[k] = tuple(float(x) for x in m.groups())
            out.setdefault(row["method"], {})[row["seed"]] = cell
    if not out:
        raise KeyError("no seed rows in the rl_seeds raw files")
    return out


def seed_table(root: Path) -> list[dict]:
    """The SFT model's held-out results, a row per seed, in SEED_RUNS' order."""
    return [row for raw in seed_runs(root) for row in raw.table("seed", "SFT greedy")]


def rm_rows(root: Path) -> list[dict]:
    return [row for raw in seed_runs(root) for row in raw.table("seed", "reward model")]


def seed_sources(root: Path) -> str:
    """The seed runs' raw files, each with its UTC span and load, then the commits and the host they ran on."""
    runs = seed_runs(root)
    bits = []
    for raw in runs:
        span = f"{raw.started}-{raw.finished}" if raw.finished else raw.started
        bits.append(f"`bench/results/{raw.name}` ({span} UTC, load {raw.load('before'):.1f} -> "
                    f"{raw.load('after'):.1f}{'; ' + raw.note if raw.note else ''})")
    commits = sorted({raw.commit for raw in runs})
    hosts = sorted({f"{raw.host}, torch's {raw.kernels} CPU kernels" for raw in runs})
    return (f"raw output{'s' if len(runs) > 1 else ''} " + ", ".join(bits)
            + f"; commit {' and '.join(commits)}; " + " and ".join(hosts))


def listed(items: list[str]) -> str:
    """Items in prose: 1234; 1234 and 42; 1234, 7 and 42."""
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]])) if items else ""


def seeds_named(seeds: list[str]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {' / '.join(seeds)}"


def render_rl_seeds_summary(root: Path) -> str:
    g = gains(root)
    sft = seed_table(root)
    seeds = [r["seed"] for r in sft]
    methods = [m for m in ("grpo", "dpo", "dpo_offline", "grpo_rm") if m in g]
    parts = []
    for method in methods:
        per = g[method]
        parts.append(f"{METHOD_NAMES[method]} " + " / ".join(signed(per[s]["greedy"][2]) for s in seeds)
                     + " and " + " / ".join(signed(per[s]["pass@1"][2]) for s in seeds))
    ends = [g[m][s]["greedy"][1] for m in methods for s in seeds]
    text = (
        f"RL on {WORDS[len(seeds)]} seed{'s' if len(seeds) > 1 else ''} (`bench/rl_seeds.py`: per seed a fresh "
        f"store to the reward model, then every method on the seed's SFT model, the default recipe, RL on "
        f"{rl_actors(root)}, 500 held-out prompts of the test split; {seed_sources(root)}), gains in greedy "
        f"exact match / pass@1 on {seeds_named(seeds)}: " + "; ".join(parts)
        + f". The SFT model{'s' if len(seeds) > 1 else ''}: greedy {' / '.join(r['SFT greedy'] for r in sft)}; "
        f"every method ends at {min(ends):.2f}-{max(ends):.2f} greedy.")
    if len(seeds) > 1:
        sd = lambda k: [statistics.stdev([g[m][s][k][2] for s in seeds]) for m in methods]  # noqa: E731
        text += (f" The gains' spread over seeds: std {min(sd('greedy')):.3f}-{max(sd('greedy')):.3f} greedy, "
                 f"{min(sd('pass@1')):.3f}-{max(sd('pass@1')):.3f} pass@1.")
    return text + (f" The binomial standard error of one evaluation on 500 prompts is at most "
                   f"{(0.25 / 500) ** 0.5:.3f} (greedy).\n")


def render_rl_seeds_table(root: Path) -> str:
    g = gains(root)
    sft = seed_table(root)
    seeds = [r["seed"] for r in sft]
    rows = [f"| {label} | " + " / ".join(signed(g[m][s]['greedy'][2]) for s in seeds) + " | "
            + " / ".join(signed(g[m][s]['pass@1'][2]) for s in seeds) + " |"
            for m, label in (("grpo", "GRPO (rl, default)"), ("dpo", "DPO, on-policy pairs"),
                             ("dpo_offline", "DPO, offline pairs (data.prefs' \"sum\")"),
                             ("grpo_rm", "GRPO on the reward model")) if m in g]
    sfts = "; ".join(f"seed {r['seed']} {r['SFT greedy']} / {r['SFT pass@1']} / {r['SFT pass@8']}" for r in sft)
    return (
        f"Every RL method on {WORDS[len(seeds)]} seed{'s' if len(seeds) > 1 else ''} (`bench/rl_seeds.py`, RL on "
        f"{rl_actors(root)}, 500 held-out prompts of the test split; {seed_sources(root)}): the SFT "
        f"model{'s' if len(seeds) > 1 else ''}' held-out greedy / pass@1 / pass@8 {sfts}, and each method's "
        f"greedy / pass@1 gains over its seed's SFT model, {seeds_named(seeds)}:\n\n"
        "| method | greedy gain | pass@1 gain |\n|---|---|---|\n" + "\n".join(rows) + "\n")


# ---- the reward model per seed (the same runs) ----

def render_rm_seeds(root: Path) -> str:
    rows = rm_rows(root)
    col = lambda k: " / ".join(num(float(r[k])) for r in rows)  # noqa: E731
    gain = [re.match(r"([+-][\d.]+) \(([+-]\d+)\)", r["gain (pairs)"]).groups() for r in rows]
    q = [float(r["bootstrap 0.5% of gain"]) for r in rows]
    seeds = [r["seed"] for r in rows]
    beyond = [s for s, x in zip(seeds, q) if x > 0]
    within = [(s, x) for s, x in zip(seeds, q) if x <= 0]
    sentence = (f"On seed{'s' if len(beyond) > 1 else ''} {listed(beyond)} the gain is beyond a paired "
                f"bootstrap's 0.5% quantile ({' / '.join(signed(x, 4) for x in q if x > 0)})" if beyond else "")
    if within:
        sentence += ("; on " if sentence else "On ") + " and ".join(f"seed {s} it is not ({signed(x, 4)})" for s, x in within)
    return (
        f"The reward model is measured against its own initialisation (a head fitted on the frozen SFT "
        f"features next to the SFT likelihood of the stripped answer; `rm.steps=0` saves it) on 400 "
        f"held-out preference pairs built on dev operand pairs (`bench/rl_seeds.py`, the same runs: the rm "
        f"stage of each seed's store): {col('reward model')} against {col('its initialisation')} "
        f"({seeds_named(seeds)}; {' / '.join(p for _, p in gain)} pairs). {sentence}. The SFT likelihood "
        f"alone, read as the model reads it (\" 68\" and \"68\" tie), scores {col('SFT likelihood alone')}; "
        f"the head alone {col('head alone (frozen SFT features)')}.\n")


def render_rm_table(root: Path) -> str:
    rows = rm_rows(root)
    body = "\n".join(
        f"| {r['seed']} | {r['reward model']} | {r['its initialisation']} | {r['gain (pairs)']} | "
        f"{r['bootstrap 0.5% of gain']} | {r['SFT likelihood alone']} | {r['head alone (frozen SFT features)']} | "
        f"{r['RM on sum / style pairs']} |" for r in rows)
    return (
        f"`bench/rl_seeds.py`, the rm stage of each seed's store ({seed_sources(root)}):\n\n"
        "| seed | reward model | its initialisation | gain (pairs) | bootstrap 0.5% quantile of the gain | "
        "SFT likelihood alone | head alone (frozen SFT features) | RM on sum / style pairs |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---|\n" + body + "\n")


def render_train(root: Path) -> str:
    raw = Raw(root, TRAIN)
    rows = {r["stage"]: r for r in raw.table("stage", "tokens/s")}
    threads = raw.field(r"(?m)^threads: (\d+)", raw.text)
    return (
        f"Throughput (`.venv/bin/python bench/train.py`, {rows['pretrain']['steps']} steps, training loop only, "
        f"{threads} threads; {provenance(raw)}): pretrain {rows['pretrain']['tokens/s']} tokens/s, SFT "
        f"{rows['sft']['tokens/s']} tokens/s with padding counted ({rows['sft']['loss tokens/s']} answer "
        f"tokens/s).\n")


# ---- the tests' own thresholds ----

def test_constant(root: Path, path: str, name: str):
    """A module-level constant of a test file, read from its source (the test is not imported)."""
    tree = ast.parse((root / path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{path}: no constant {name}")


def render_margins(root: Path) -> str:
    """test_rl.py's MARGINS, and whether each is under the smallest gain the raw files hold."""
    m = test_constant(root, "tests/stages/test_rl.py", "MARGINS")
    g = gains(root)
    over = [f"{METHOD_NAMES[k]}'s {metric} ({signed(m[k][i], 2)} against {signed(low, 3)})"
            for k in m for i, metric in enumerate(("greedy", "pass@1"))
            if m[k][i] >= (low := min(cell[metric][2] for cell in g[k].values()))]
    n = len(seed_table(root))
    least = f"the smallest of the {WORDS[n]} seeds' gains above" if n > 1 else "the seed's gain above"
    tail = f"each under {least}" if not over else f"not all under {least}: " + ", ".join(over)
    return ("tests/stages/test_rl.py asserts on seed 1234 (the CI pipeline's) greedy / pass@1 gains over "
            "the SFT model of more than " + ", ".join(
                f"{signed(m[k][0], 2)} / {signed(m[k][1], 2)} for {METHOD_NAMES[k]}" for k in
                ("grpo", "dpo", "dpo_offline", "grpo_rm") if k in m)
            + f" (its MARGINS), {tail}.\n")


# ---- bench/README.md: one row per raw file ----

def summary(raw: Raw) -> str:
    """A raw file's headline numbers, from its own tables and lines, by the script that wrote it."""
    script = raw.field(r"(?:bench|dev)/(\w+)\.py", raw.head[0] if raw.head else "") or ""
    line = lambda pattern: raw.field(pattern, raw.text)
    if script == "tiny":
        rows = {r["model"]: r for r in raw.table("model", "greedy exact match")}
        wall = next(r["seconds (RUNNING -> SUCCEEDED)"] for r in raw.table("stage run") if "--stage all" in r["stage run"])
        rl = rows["rl (grpo)"]
        return (f"`jobs submit tiny --stage all` {wall} s wall; held out: SFT {rows['sft']['greedy exact match']} "
                f"greedy, GRPO {rl['greedy exact match']} / {rl['pass@1']} / {rl['pass@8']} (greedy / pass@1 / pass@8)")
    if script == "cli":
        rows = raw.table("command", "median s")
        return "; ".join(f"{r['command']} {r['median s']} s median" for r in rows)
    if script == "submit":
        rows = raw.table("submit path", "median s")
        overhead = line(r"overhead: ([+-][\d.]+ s)")
        return "; ".join(f"{r['submit path']} {r['median s']} s median" for r in rows) + f"; overhead {overhead}"
    if script == "train":
        return "; ".join(f"{r['stage']} {r['tokens/s']} tokens/s ({r['loss tokens/s']} carrying loss)"
                         for r in raw.table("stage", "tokens/s"))
    if script == "hash":
        return "; ".join(f"{c} cache: `dvc add` (hard links) / ours {x}" for c, x in
                         re.findall(r"(warm|cold) cache: dvc add with cache.type=hardlink / ours = ([\d.]+x)", raw.text))
    if script == "rl":
        rows = [r for t in raw.tables for r in t[1:] if r[0].startswith("**ours / TRL")]
        return "ours / TRL in s a step: " + ", ".join(r[1].strip("*") for r in rows)
    if script == "ray_boot":
        rows = raw.table("nodes", "who", "first line -> all alive")
        return "; ".join(f"{r['nodes']} node{'s' if r['nodes'] != '1' else ''}, {r['who']}: "
                         f"{r['first line -> all alive']} s" for r in rows) + " (the batch script's first line -> all nodes alive)"
    if script == "lineage":
        rate = line(r"Store.register at this size[^:]*: [\d.]+ s, ([\d.]+) registrations/s")
        latest = next(r for r in raw.table("this store: median (best) ms") if r[next(iter(r))].startswith("resolve") and ":latest" in r[next(iter(r))])
        text = f"`Store.register` {rate} a second; resolve `:latest` {latest['this store: median (best) ms']} ms"
        try:
            cli = raw.table("median ms", "best ms")
            text += "; " + "; ".join(f"{r[next(iter(r))]} {r['median ms']} ms median" for r in cli)
        except KeyError:
            pass
        return text
    if script == "rl_seeds":
        sft = raw.table("seed", "SFT greedy")
        text = f"{seeds_named([r['seed'] for r in sft])}: SFT greedy {' / '.join(r['SFT greedy'] for r in sft)}"
        methods: dict = {}
        for r in raw.table("seed", "method", "greedy SFT -> RL"):
            methods.setdefault(r["method"], []).append(r["greedy SFT -> RL"].split("(")[1].rstrip(")"))
        if methods:
            text += "; greedy gains " + ", ".join(f"{m} {' / '.join(v)}" for m, v in methods.items())
        rm = raw.table("seed", "reward model")
        if rm:
            text += (f"; reward model {' / '.join(r['reward model'] for r in rm)} (its initialisation "
                     f"{' / '.join(r['its initialisation'] for r in rm)})")
        return text + ("; published (recipes/tiny/README.md)" if raw.name in SEED_RUNS else "")
    if script == "bench_sweep":
        rows = raw.table("submit", "sbatch calls", "wall s")
        ratio = line(r"the sweep is ([\d.]+x) faster")
        return ("; ".join(f"{r['submit']} {r['wall s']} s wall, {r['sbatch calls']} sbatch" for r in rows)
                + f"; the sweep {ratio} faster")
    if script == "bridge_gpu":   # dev/bridge_gpu.sh: Megatron-Bridge's loops on one GPU
        gpu, status = line(r"bridge_gpu: GPU ([^,]+),"), line(r"bridge_gpu: exit (\d+)")
        try:
            rows = raw.table("run", "GPU", "lm loss first -> last")
        except KeyError:
            return f"GPU {gpu}: exit {status}, no run completed (see the file)"
        return f"on {gpu}: " + "; ".join(
            f"{r['run']} iterations {r['iterations']} in {r['seconds']} s, lm loss {r['lm loss first -> last']}"
            + (f", held out {r['held-out exact match']} greedy" if r["held-out exact match"] != "-" else "")
            for r in rows)
    return "see the file"


def bench_rows(root: Path) -> str:
    """Every raw file under bench/results/, newest first: its command, where and when, its load, its result."""
    rows = []
    for path in sorted((root / "bench" / "results").glob("*.md"), key=lambda p: (p.name[-13:], p.name), reverse=True):
        raw = Raw(root, path.name)
        command = raw.field(r"^# `([^`]*)`") or "-"
        where = ", ".join(x for x in (raw.commit, f"{raw.started} UTC" if raw.started else None,
                                       raw.host, raw.kernels) if x) or "in the file's header"
        before, after = raw.load("before"), raw.load("after")
        load = f"{before:.1f} -> {after:.1f}" if before is not None and after is not None else "-"
        rows.append(f"| `{path.name}` | `{command}` | {where} | {load} | {summary(raw)} |")
    return ("| raw file | command | commit, UTC start, host, kernels | load (1 min) before -> after | result |\n"
            "|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


def render_suite_times(root: Path) -> str:
    """README's suite time: per CPU kernel build, the newest whole-suite run dev/test.sh kept
    (bench/results/test-runs.jsonl)."""
    path = root / "bench" / "results" / "test-runs.jsonl"
    if not path.is_file():
        raise Missing(str(path.relative_to(root)))
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    newest = {r["host"].get("cpu_kernels"): r for r in runs if not r["args"]}   # later lines win
    if not newest:
        raise Missing(f"{path.relative_to(root)} (no run of the whole suite)")
    load = lambda text: float(text.split()[0])  # noqa: E731  (the 1-minute average)
    lines = []
    for kernels, r in sorted(newest.items(), key=lambda kv: kv[1]["started"]):
        steps = ", ".join(f"{n} {v['s']} s" for n, v in sorted(r["setup_steps"].items(), key=lambda kv: -kv[1]["s"]))
        host = r["host"]
        named = f"torch's {kernels.upper()} CPU kernels" if kernels else "CPU kernels not named"
        lines.append(f"at commit {r['commit'][:7]}{' with local changes' if r['dirty'] else ''}, {r['started'][:10]} "
                     f"{r['started'][11:16]}-{r['ended'][11:16]} UTC, {host['cpu']}, {host['cpus']} cores, {named}, "
                     f"{r['workers']} workers, load average (1 min) {load(r['load_before']):.1f} before and "
                     f"{load(r['load_after']):.1f} after: {r['pytest']}; set-up {r['setup_s']} s ({steps}), tests "
                     f"{r['tests_s']:,} s, {r['total_s']:,} s in all")
    return ("`./dev/test.sh` (raw: per CPU kernel build, the last whole-suite line of "
            "`bench/results/test-runs.jsonl`, which dev/test.sh appends at every run) " + "; and ".join(lines) + ".\n")


BLOCKS = {
    "tiny-headline": render_tiny_headline,
    "tiny-times": render_tiny_times,
    "rl-seeds-summary": render_rl_seeds_summary,
    "rl-seeds-table": render_rl_seeds_table,
    "rm-seeds": render_rm_seeds,
    "rm-table": render_rm_table,
    "rl-margins": render_margins,
    "train-throughput": render_train,
    "bench-raw-files": bench_rows,
    "suite-times": render_suite_times,
}


def wrap(text: str) -> str:
    """Prose paragraphs wrapped as the docs are (100 columns); tables as rendered."""
    paragraphs = text.rstrip("\n").split("\n\n")
    return "\n\n".join(p if p.startswith("|") else textwrap.fill(p, 100, break_long_words=False,
                                                                   break_on_hyphens=False)
                         for p in paragraphs) + "\n"


def docs(root: Path) -> list[Path]:
    return sorted({p for pattern in DOCS for p in root.glob(pattern) if p.is_file()})


def publish(root: Path, check: bool) -> list[str]:
    """Render every marked block; rewrite the docs, or (check) list what differs. Returns the problems."""
    problems, seen, cache = [], set(), {}
    for doc in docs(root):
        text = doc.read_text()

        def fill(m: re.Match) -> str:
            name = m.group(2)
            seen.add(name)
            if name not in BLOCKS:
                problems.append(f"{doc.relative_to(root)}: unknown block {name}")
                return m.group(0)
            if name not in cache:
                try:
                    cache[name] = wrap(BLOCKS[name](root))
                except Missing as e:
                    cache[name] = e
            if isinstance(cache[name], Missing):
                problems.append(f"{doc.relative_to(root)}: block {name}: raw file missing: {cache[name]}")
                return m.group(0)
            if m.group(3) != cache[name]:
                problems.append(f"{doc.relative_to(root)}: block {name} differs from what bench/publish.py renders")
            return m.group(1) + cache[name] + m.group(4)

        new = MARK.sub(fill, text)
        if not check and new != text:
            doc.write_text(new)
    for name in sorted(set(BLOCKS) - seen):
        problems.append(f"block {name} is in no doc (its markers are gone)")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs or a file is missing")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout")
    args = ap.parse_args()
    problems = publish(args.root.resolve(), args.check)
    if not args.check:   # a block that differed is rewritten now; the rest stays a problem
        problems = [p for p in problems if "differs" not in p]
    for p in problems:
        print(f"bench/publish.py: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
