"""What a folder of each artifact kind must hold for the stages that read it (stages/formats.py,
stages/lm.py, stages/eval.py, stages/rm.py): checked when a user brings their own with `jobs add`,
so a corpus without train.txt is refused in one line there, not in the job after a queue wait.

Only the standard library: `jobs add` checks without importing torch.
"""
from __future__ import annotations

import json
from pathlib import Path

WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER = ("tokenizer.json", "tokenizer_config.json")


def _first_row(path: Path) -> dict | str:
    """The first JSON row of a .jsonl file, or what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    return row if isinstance(row, dict) else f"{path.name}: its first row is not a JSON object"
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return f"{path.name} cannot be read as JSON lines ({type(e).__name__})"
    return f"{path.name} has no rows"


def _rows(folder: Path, name: str, keys: tuple[str, ...]) -> list[str]:
    path = folder / name
    if not path.is_file():
        return [f"no {name}"]
    row = _first_row(path)
    if isinstance(row, str):
        return [row]
    missing = [k for k in keys if k not in row]
    return [f"{name} rows need {', '.join(keys)} (its first row has {', '.join(sorted(row)) or 'nothing'})"] if missing else []


def _any(folder: Path, patterns: tuple[str, ...]) -> bool:
    return any(next(folder.glob(p), None) is not None for p in patterns)


def _hf_model(folder: Path) -> list[str]:
    problems = [] if (folder / "config.json").is_file() else ["no config.json"]
    if not _any(folder, WEIGHTS):
        problems.append("no weights (*.safetensors or pytorch_model*.bin)")
    if not _any(folder, TOKENIZER):
        problems.append("no tokenizer files (tokenizer.json or tokenizer_config.json): sft, rm and eval load the "
                        "tokenizer from the model's folder")
    return problems


def _corpus(folder: Path) -> list[str]:
    if (folder / "blend.json").is_file() or (folder / "train.txt").is_file():
        return []
    return ["no train.txt (text, one document per line) and no blend.json (a Megatron blend)"]


def _sft(folder: Path) -> list[str]:
    if (folder / "training.jsonl").is_file():
        return _rows(folder, "training.jsonl", ("input", "output"))
    return _rows(folder, "train.jsonl", ("prompt", "answer"))


#: kind -> (what it is, as a user reads it; the check of a folder: its problems)
LAYOUTS = {
    "corpus": ("train.txt or blend.json", _corpus),
    "pretrain-blend": ("blend.json", lambda f: [] if (f / "blend.json").is_file() else ["no blend.json"]),
    "tokenizer": ("an HF tokenizer (tokenizer.json or tokenizer_config.json)",
                  lambda f: [] if _any(f, TOKENIZER) else ["no tokenizer.json or tokenizer_config.json"]),
    "model": ("an HF model folder (config.json, weights, tokenizer files)", _hf_model),
    "reward-model": ("an HF model folder with reward_head.safetensors",
                     lambda f: _hf_model(f) + ([] if (f / "reward_head.safetensors").is_file()
                                                else ["no reward_head.safetensors (the rm stage's head)"])),
    "sft-data": ("train.jsonl {prompt, answer} or training.jsonl {input, output}", _sft),
    "pref-data": ("train.jsonl {prompt, chosen, rejected}", lambda f: _rows(f, "train.jsonl", ("prompt", "chosen", "rejected"))),
    "rl-prompts": ("train.jsonl and validation.jsonl {prompt, answer}",
                   lambda f: _rows(f, "train.jsonl", ("prompt", "answer")) + _rows(f, "validation.jsonl", ("prompt", "answer"))),
    "eval-data": ("test.jsonl {prompt, answer}", lambda f: _rows(f, "test.jsonl", ("prompt", "answer"))),
}


def problems(kind: str, path: Path) -> list[str]:
    """What `path` lacks to be read as `kind` (nothing for a kind no layout is known of)."""
    if kind not in LAYOUTS:
        return []
    what, check = LAYOUTS[kind]
    if not path.is_dir():
        return [f"a {kind} artifact is a folder with {what}, not a single file"]
    return check(path)
