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
`_hf_placeholder` rows (their question lives in DAPO / Skywork) are dropped and counted
(prep/rl/dropped_placeholder): resolving them from those hub datasets is not implemented here.
Launch: jobs submit nano3 --stage prep_rl
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

from stages.schema import Bool, Float, Int, List, Map, Str, check
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
})
WORD = re.compile(r"[a-z0-9]+")


def check_config(config: dict) -> list[str]:
    cfg = config["prep_rl"]
    problems = check(cfg, SCHEMA, "prep_rl")
    if problems:
        return problems
    problems += source_problems(cfg["sources"], "prep_rl.sources")
    problems += source_problems(cfg["eval"]["sources"], "prep_rl.eval.sources")
    if not cfg["mix"]:
        problems.append("prep_rl.mix must give each environment a share (e.g. {math: 1.0})")
    for env, share in cfg["mix"].items():
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share > 0:
            problems.append(f"prep_rl.mix.{env} must be a number > 0 (got {share!r})")
    for i, s in enumerate(cfg["sources"]):
        where = f"prep_rl.sources[{i}]"
        envs = [s["env"]] if "env" in s else list((s.get("env_map") or {}).values())
        if s.get("resolve_placeholders"):
            problems.append(f"{where}.resolve_placeholders: fetching _hf_placeholder rows from DAPO / Skywork is not "
                            "implemented (set false: they are dropped and counted)")
        if not envs:
            problems.append(f"{where} needs env (one environment for every row) or env_map (row env -> ours)")
        problems += [f"{where}: environment {e!r} is not in prep_rl.mix ({', '.join(cfg['mix'])})"
                     for e in envs if e not in cfg["mix"]]
    return problems


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


def collect(cfg: dict, dropped: dict) -> list[dict]:
    from stages.prep import sources as src

    pool = []
    for s in cfg["sources"]:
        for row in src.load(dict(s, sample=cfg["sample"])):
            if row.get("_hf_placeholder") is not None:   # its question lives in another hub dataset (DAPO, Skywork)
                dropped["placeholder"] += 1
                continue
            prompt = _prompt_text(_first(row, s.get("prompt_field"), PROMPT_FIELDS))
            if prompt is None:
                dropped["unresolved"] += 1
                continue
            if "env" in s:
                env = s["env"]
            else:
                env = (s.get("env_map") or {}).get(str(_first(row, s.get("env_field"), ENV_FIELDS)))
                if env is None:
                    dropped["unmapped_env"] += 1
                    continue
            answer = "" if s.get("prompt_only") else _first(row, s.get("answer_field"), ANSWER_FIELDS)
            if answer is None or (not s.get("prompt_only") and str(answer).strip() == ""):
                dropped["no_answer"] += 1
                continue
            pool.append({"prompt": prompt, "answer": str(answer).strip(), "task_name": env})
    return pool


def preview(config: dict, resources: dict) -> str:
    cfg = config["prep_rl"]
    return "\n".join([
        f"prep_rl: mix {cfg['mix']}, {cfg['valid_size']} validation prompts, eval = "
        f"{', '.join(s['name'] for s in cfg['eval']['sources']) or 'no benchmark'} + {cfg['eval']['held_out']} held out, "
        f"training prompts sharing a {cfg['decontaminate']['ngram']}-gram with an eval prompt dropped",
        *(f"  {s['name']}: {s['path']} -> {s.get('env') or s.get('env_map')}" for s in cfg["sources"]),
        "writes prompts/{train,validation}.jsonl {prompt, answer, task_name}; eval/test.jsonl {prompt, answer, source}"])


def run(ctx) -> dict[str, Path]:
    from stages.prep import sources as src

    cfg = ctx.section("prep_rl")
    problems = check_config(ctx.config)   # what submit checked; a context built elsewhere was not
    if problems:
        raise StageError("prep_rl: " + "; ".join(problems))
    rng = random.Random(cfg["seed"])
    dropped = {"placeholder": 0, "unresolved": 0, "unmapped_env": 0, "no_answer": 0, "not_in_mix": 0}
    pool = collect(cfg, dropped)
    rng.shuffle(pool)
    kept = [r for r in pool if r["task_name"] in cfg["mix"]]
    dropped["not_in_mix"] = len(pool) - len(kept)

    evals = []
    for s in cfg["eval"]["sources"]:
        for row in src.load(dict(s, sample=cfg["sample"])):
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
    if not train:
        raise StageError(f"prep_rl: no training prompt left (pool {len(pool)}, dropped {dropped}, "
                         f"decontaminated {contaminated}, valid_size {cfg['valid_size']})")
    prompts, eval_dir = ctx.output_dir("prompts"), ctx.output_dir("eval")
    _jsonl(prompts / "train.jsonl", train)
    _jsonl(prompts / "validation.jsonl", valid)
    _jsonl(eval_dir / "test.jsonl", evals)
    per_env = {e: sum(r["task_name"] == e for r in train) for e in cfg["mix"]}
    (prompts / "manifest.json").write_text(json.dumps({
        "format": "nemo-rl-response-jsonl", "input_key": "prompt", "output_key": "answer", "train": len(train),
        "validation": len(valid), "per_env": per_env, "dropped": dropped, "decontaminated": contaminated,
        "ngram": n}, indent=1, sort_keys=True) + "\n")
    (eval_dir / "manifest.json").write_text(json.dumps({
        "rows": len(evals), "sources": sorted({e["source"] for e in evals})}, indent=1, sort_keys=True) + "\n")
    ctx.log({"prep/rl/train": len(train), "prep/rl/validation": len(valid), "prep/rl/eval": len(evals),
             "prep/rl/decontaminated": contaminated, **{f"prep/rl/train/{e}": c for e, c in per_env.items()},
             **{f"prep/rl/dropped_{k}": v for k, v in dropped.items()}}, step=0)
    return {"prompts": prompts, "eval": eval_dir}


def _decontaminate(rows: list[dict], evals: list[dict], n: int) -> list[dict]:
    banned = set().union(*(ngrams(e["prompt"], n) for e in evals)) if evals else set()
    return [r for r in rows if not (ngrams(r["prompt"], n) & banned)]


def _mix(rows: list[dict], mix: dict, rng: random.Random) -> list[dict]:
    """The largest set with exactly the mix's shares (up to rounding); an environment the mix names
    but the sources lack gets none, the rest keep their relative shares."""
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
