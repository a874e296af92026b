"""prep_rl: RL prompts with verifiable answers and their reward environment, the validation split,
and the eval set, decontaminated against each other. No tokenization: NeMo RL applies the chat
template at rollout time.

Inputs: none. Outputs:
    prompts/  train.jsonl, validation.jsonl  {"prompt", "answer", "task_name"}: what NeMo RL nano-v3's
              ResponseDataset reads (data.dataset_name: ResponseDataset, input_key: prompt,
              output_key: answer); task_name is the environment rl.yaml's env runs for the row.
              manifest.json: counts per environment and dropped rows by reason.
    eval/     test.jsonl {"prompt", "answer", "source"}: the benchmarks plus `held_out` prompts taken
              out of the RL pool before it is split.
Decontamination: a training or validation prompt sharing any word n-gram (n = decontaminate.ngram,
lower-cased, punctuation dropped) with an eval prompt is dropped; a text shorter than n words counts
as one n-gram. The number dropped is the run's metric prep/rl/decontaminated.
Rows: NVIDIA's RL blend layout (Nemotron's RL data prep): the prompt from `responses_create_params.input`
(the last user turn) or `question`, the answer from `expected_answer`, the environment from the NeMo Gym
agent in `agent_ref.name` (env_map: agent -> our environment); the flat {prompt, answer, env} layout too.
`_hf_placeholder` rows (their question lives in DAPO-Math-17k / Skywork-OR1) are resolved from those
datasets when the source sets resolve_placeholders (stages/prep/placeholders.py; prep_rl.placeholders names
each target, prep_rl.hub_mirror a local copy of the hub), else dropped and counted
(prep/rl/dropped_placeholder).
Every environment of the mix must get prompts. At submit, the sources on this machine's file system (a
path, or a hub dataset through the mirror) are read until each environment they could feed has a row;
one that none of them feeds is refused in one line, with what its rows lacked. Hub sources are read only
in the job, which refuses an environment left empty the same way. The job reports per environment the
prompts it kept (prep/rl/kept/<env>, before the mix) and trained on (prep/rl/train/<env>).
Launch: jobs submit nano3 --stage prep_rl
"""
from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

from stages.schema import Bool, Int, List, Map, Str, check
from stages.prep import placeholders as ph, sources as src
from stages.prep.pretrain import NAME, source_problems
from stages.contract import StageError

SOURCE = Map({
    "name": Str(pattern=NAME), "path": Str(empty=False), "subset": Str(required=False, null=True),
    "split": Str(required=False, null=True), "revision": Str(required=False, null=True),
    "prompt_field": Str(required=False, empty=False), "answer_field": Str(required=False, empty=False),
    "env_field": Str(required=False, empty=False), "env": Str(required=False, pattern=NAME),
    "env_map": Map({}, extra=True, required=False), "prompt_only": Bool(required=False),
    "resolve_placeholders": Bool(required=False),
})
EVAL_SOURCE = Map({
    "name": Str(pattern=NAME), "path": Str(empty=False), "subset": Str(required=False, null=True),
    "split": Str(required=False, null=True), "revision": Str(required=False, null=True),
    "prompt_field": Str(empty=False), "answer_field": Str(empty=False),
})
SCHEMA = Map({
    "sources": List(SOURCE, min_len=1),
    "mix": Map({}, extra=True),
    "valid_size": Int(0, 10_000_000),
    "eval": Map({"sources": List(EVAL_SOURCE), "held_out": Int(0, 10_000_000)}),
    "decontaminate": Map({"ngram": Int(1, 1000)}),
    "sample": Int(1, null=True),
    "seed": Int(0, 2**32 - 1),
    "placeholders": Map({}, extra=True, required=False),     # blend `dataset` name -> placeholders.TARGET
    "hub_mirror": Str(required=False, null=True),
})
WORD = re.compile(r"[a-z0-9]+")


def check_config(config: dict) -> list[str]:
    cfg = config["prep_rl"]
    problems = check(cfg, SCHEMA, "prep_rl")
    if problems:
        return problems
    mirror = cfg.get("hub_mirror")
    if mirror is not None and not (mirror.startswith("/") and os.path.isdir(mirror)):
        return [f"prep_rl.hub_mirror {mirror!r} must be an absolute path to a folder (or null: the hub itself)"]
    problems += source_problems(cfg["sources"], "prep_rl.sources", mirror)
    problems += source_problems(cfg["eval"]["sources"], "prep_rl.eval.sources", mirror)
    if not cfg["mix"]:
        problems.append("prep_rl.mix must give each environment a share (e.g. {math: 1.0})")
    for env, share in cfg["mix"].items():
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share > 0:
            problems.append(f"prep_rl.mix.{env} must be a number > 0 (got {share!r})")
    targets = cfg.get("placeholders") or {}
    for name, target in targets.items():
        where = f"prep_rl.placeholders.{name}"
        problems += check(target, ph.TARGET, where) or \
            [p for p in [src.path_problem(target["path"], f"{where}.path", mirror)] if p]
    for i, s in enumerate(cfg["sources"]):
        where = f"prep_rl.sources[{i}]"
        envs = [s["env"]] if "env" in s else list((s.get("env_map") or {}).values())
        if s.get("resolve_placeholders") and not targets:
            problems.append(f"{where}.resolve_placeholders needs prep_rl.placeholders (blend dataset name -> "
                            "the hub dataset its rows point into)")
        if not envs:
            problems.append(f"{where} needs env (one environment for every row) or env_map (row env -> ours)")
        problems += [f"{where}: environment {e!r} is not in prep_rl.mix ({', '.join(cfg['mix'])})"
                     for e in envs if e not in cfg["mix"]]
    return problems or _census(cfg)


def _census(cfg: dict) -> list[str]:
    """An environment of the mix that no row of the local sources would feed, while no hub source
    could: refused, with what its rows lacked. Each source is read until every environment it could
    feed has a row (the whole source only when one has none), `sample` rows at most, as the job does."""
    mirror, targets = cfg.get("hub_mirror"), cfg.get("placeholders") or {}
    fed, unread, lacked = set(), set(), {}
    for s in cfg["sources"]:
        envs = {s["env"]} if "env" in s else set((s.get("env_map") or {}).values())
        source = dict(s, sample=cfg["sample"], mirror=mirror)
        if not src.local(source):
            unread |= envs
            continue
        for row in src.stream(source):
            if envs <= fed:
                break
            env, why = _feeds(row, s, targets)
            if why is None:
                fed.add(env)
            elif env is not None:
                lacked.setdefault(env, {}).setdefault(s["name"], {}).setdefault(why, 0)
                lacked[env][s["name"]][why] += 1
    problems = []
    for env in cfg["mix"]:
        if env in fed or env in unread:
            continue
        seen = "; ".join(f"{name}: " + ", ".join(f"{n} {why}" for why, n in reasons.items())
                         for name, reasons in lacked.get(env, {}).items())
        problems.append(f"prep_rl.mix.{env}: no source row would become a {env!r} prompt "
                        f"({seen or 'no row is routed to it'})")
    return problems


def _feeds(row: dict, s: dict, targets: dict) -> tuple[str | None, str | None]:
    """(the environment the row goes to, why it would give no prompt there or None)."""
    env = _env(row, s)
    if env is None:
        return None, "unmapped"
    if row.get("_hf_placeholder") is not None:
        if not s.get("resolve_placeholders"):
            return env, "_hf_placeholder rows with resolve_placeholders off"
        return env, None if row.get("dataset") in targets else "_hf_placeholder rows of a dataset prep_rl.placeholders lacks"
    if _prompt_text(_first(row, s.get("prompt_field"), PROMPT_FIELDS)) is None:
        return env, "rows without a prompt"
    if not s.get("prompt_only") and str(_first(row, s.get("answer_field"), ANSWER_FIELDS) or "").strip() == "":
        return env, "rows without an answer"
    return env, None


def _env(row: dict, s: dict) -> str | None:
    if "env" in s:
        return s["env"]
    return (s.get("env_map") or {}).get(str(_first(row, s.get("env_field"), ENV_FIELDS)))


def ngrams(text: str, n: int) -> set[tuple]:
    words = WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _get(row: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(row, dict) or part not in row:
            return None
        row = row[part]
    return row


def _prompt_text(value) -> str | None:
    """A prompt given as a string, or as messages (the last user turn)."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list):
        users = [m.get("content") for m in value if isinstance(m, dict) and m.get("role") == "user"]
        return _prompt_text(users[-1]) if users else None
    return None


#: Where a row of NVIDIA's RL blend keeps each field (Nemotron's RL data prep writes `question`,
#: `expected_answer` and `responses_create_params`, keeps the source `dataset`, and NeMo Gym routes a row
#: to the agent named in `agent_ref.name`); the older flat layout {prompt, answer, env} is read too.
PROMPT_FIELDS = ("prompt", "responses_create_params.input", "question", "messages")
ANSWER_FIELDS = ("expected_answer", "answer")
ENV_FIELDS = ("agent_ref.name", "env")


def _first(row: dict, given: str | None, defaults: tuple[str, ...]):
    for field in ([given] if given else defaults):
        value = _get(row, field)
        if value is not None:
            return value
    return None


def collect(cfg: dict, dropped: dict) -> tuple[list[dict], dict]:
    """The pool of prompts, and the placeholder rows' counts (resolved, and why the others were not)."""
    resolver = ph.Resolver(cfg.get("placeholders") or {}, cfg.get("hub_mirror"))
    pool = []
    for s in cfg["sources"]:
        for row in src.load(dict(s, sample=cfg["sample"], mirror=cfg.get("hub_mirror"))):
            env = _env(row, s)
            if env is None:
                dropped["unmapped_env"] += 1
                continue
            if row.get("_hf_placeholder") is not None:   # its question lives in another hub dataset (DAPO, Skywork)
                row = resolver.resolve(row) if s.get("resolve_placeholders") else None
                if row is None:
                    dropped["placeholder"] += 1
                    continue
            prompt = _prompt_text(_first(row, s.get("prompt_field"), PROMPT_FIELDS))
            if prompt is None:
                dropped["unresolved"] += 1
                continue
            answer = "" if s.get("prompt_only") else _first(row, s.get("answer_field"), ANSWER_FIELDS)
            if answer is None or (not s.get("prompt_only") and str(answer).strip() == ""):
                dropped["no_answer"] += 1
                continue
            pool.append({"prompt": prompt, "answer": str(answer).strip(), "task_name": env})
    return pool, resolver.counts


def preview(config: dict, resources: dict) -> str:
    cfg = config["prep_rl"]
    return "\n".join([
        f"prep_rl: mix {cfg['mix']}, {cfg['valid_size']} validation prompts, eval = "
        f"{', '.join(s['name'] for s in cfg['eval']['sources']) or 'no benchmark'} + {cfg['eval']['held_out']} held out, "
        f"training prompts sharing a {cfg['decontaminate']['ngram']}-gram with an eval prompt dropped",
        *(f"  {s['name']}: {s['path']} -> {s.get('env') or s.get('env_map')}" for s in cfg["sources"]),
        "writes prompts/{train,validation}.jsonl {prompt, answer, task_name}; eval/test.jsonl {prompt, answer, source}"])


def gate(ctx, produced: dict[str, Path]) -> list:
    """Each file has the rows its manifest.json counts, and there are prompts to train on."""
    from stages import gate as g

    return (g.manifest_rows(produced["prompts"], {"train": "train.jsonl", "validation": "validation.jsonl"}, ["train"])
            + g.manifest_rows(produced["eval"], {"rows": "test.jsonl"}))


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("prep_rl")
    problems = check_config(ctx.config)   # what submit checked; a context built elsewhere was not
    if problems:
        raise StageError("prep_rl: " + "; ".join(problems))
    rng = random.Random(cfg["seed"])
    dropped = {"placeholder": 0, "unresolved": 0, "unmapped_env": 0, "no_answer": 0, "not_in_mix": 0}
    pool, placeholder = collect(cfg, dropped)
    rng.shuffle(pool)
    kept = [r for r in pool if r["task_name"] in cfg["mix"]]
    dropped["not_in_mix"] = len(pool) - len(kept)

    evals = []
    for s in cfg["eval"]["sources"]:
        for row in src.load(dict(s, sample=cfg["sample"], mirror=cfg.get("hub_mirror"))):
            prompt = _prompt_text(_get(row, s["prompt_field"]))
            if prompt is not None:
                evals.append({"prompt": prompt, "answer": str(_get(row, s["answer_field"])).strip(), "source": s["name"]})
    # Against the benchmarks first, so a contaminated row never becomes a held-out prompt; then the
    # held-out prompts (verifiable ones, with an answer) leave the pool, and the rest is checked
    # against them too.
    n = cfg["decontaminate"]["ngram"]
    clean = _decontaminate(kept, evals, n)
    verifiable = [i for i, r in enumerate(clean) if r["answer"]][: cfg["eval"]["held_out"]]
    held = [{"prompt": clean[i]["prompt"], "answer": clean[i]["answer"], "source": "held_out"} for i in verifiable]
    rest = [r for i, r in enumerate(clean) if i not in set(verifiable)]
    evals += held
    clean = _decontaminate(rest, held, n)
    contaminated = len(kept) - len(held) - len(clean)

    mixed = _mix(clean, cfg["mix"], rng)
    valid, train = mixed[: cfg["valid_size"]], mixed[cfg["valid_size"]:]
    kept_env = {e: sum(r["task_name"] == e for r in clean) for e in cfg["mix"]}
    per_env = {e: sum(r["task_name"] == e for r in train) for e in cfg["mix"]}
    empty = [e for e, c in per_env.items() if not c]
    if empty:     # rl would train on another mix than the one asked for, or on nothing
        raise StageError(f"prep_rl: no training prompt left for {', '.join(empty)} (kept per environment {kept_env}, "
                         f"pool {len(pool)}, dropped {dropped}, placeholder rows {placeholder}, "
                         f"decontaminated {contaminated}, valid_size {cfg['valid_size']})")
    prompts, eval_dir = ctx.output_dir("prompts"), ctx.output_dir("eval")
    _jsonl(prompts / "train.jsonl", train)
    _jsonl(prompts / "validation.jsonl", valid)
    _jsonl(eval_dir / "test.jsonl", evals)
    (prompts / "manifest.json").write_text(json.dumps({
        "format": "nemo-rl-response-jsonl", "input_key": "prompt", "output_key": "answer", "train": len(train),
        "validation": len(valid), "per_env": per_env, "kept_per_env": kept_env, "dropped": dropped,
        "placeholder_rows": placeholder, "decontaminated": contaminated,
        "ngram": n}, indent=1, sort_keys=True) + "\n")
    (eval_dir / "manifest.json").write_text(json.dumps({
        "rows": len(evals), "sources": sorted({e["source"] for e in evals})}, indent=1, sort_keys=True) + "\n")
    ctx.log({"prep/rl/train": len(train), "prep/rl/validation": len(valid), "prep/rl/eval": len(evals),
             "prep/rl/decontaminated": contaminated, **{f"prep/rl/train/{e}": c for e, c in per_env.items()},
             **{f"prep/rl/kept/{e}": c for e, c in kept_env.items()},
             **{f"prep/rl/placeholder_{k}": v for k, v in placeholder.items()},
             **{f"prep/rl/dropped_{k}": v for k, v in dropped.items()}}, step=0)
    return {"prompts": prompts, "eval": eval_dir}


def _decontaminate(rows: list[dict], evals: list[dict], n: int) -> list[dict]:
    banned = set().union(*(ngrams(e["prompt"], n) for e in evals)) if evals else set()
    return [r for r in rows if not (ngrams(r["prompt"], n) & banned)]


def _mix(rows: list[dict], mix: dict, rng: random.Random) -> list[dict]:
    """The largest set with exactly the mix's shares (up to rounding); an environment the mix names
    but the sources lack gets none, the rest keep their relative shares (run then refuses)."""
    by_env = {e: [r for r in rows if r["task_name"] == e] for e in mix}
    present = {e: w for e, w in mix.items() if by_env[e]}
    if not present:
        return []
    total_w = sum(present.values())
    total = min(len(by_env[e]) * total_w / w for e, w in present.items())
    out = [r for e, w in present.items() for r in by_env[e][: round(total * w / total_w)]]
    rng.shuffle(out)
    return out


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
