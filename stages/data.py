"""Tiny data stage: the two-number addition task, generated deterministically from a seed.

Outputs (each a folder, each registered as an artifact):
    corpus/train.txt      pretraining text: counting runs and one-digit sums. It teaches digits and
                          the "a+b=c" shape, never a two-digit sum, so SFT has something to add.
    sft/train.jsonl       {"prompt": "23+45=", "answer": "68"}; where the ones digits carry, 60% (data.sft_carry_slips)
                          written without the carry ("27+45=" -> "62"): an annotator's slip RL can undo
    prefs/train.jsonl     {"prompt", "chosen", "rejected", "kind"}, alternating kinds: "sum" (the right
                          sum vs its tens digit one up or one down, or the sum cut short or run on)
                          and "style" (the right sum written " 68", the house style, vs the bare
                          "68" SFT learned): a preference SFT does not hold
    prefs/validation.jsonl  the same kinds of pair on the dev split, one per dev pair: the reward
                          model's held-out pairs (rm.held_out: validation)
    rl/train.jsonl        {"prompt", "answer"}: prompts a verifier can score
    rl/validation.jsonl   the first n_rl_val dev pairs: the rl stage's periodic validation
    eval/test.jsonl       {"prompt", "answer"} of the test split, read by the eval stage only
    tokenizer/            a character-level tokenizer trained with `tokenizers`, saved in HF format

Splits are made of unordered operand pairs, so "23+45=" and its commuted twin "45+23=" always fall
in the same split: test (n_eval pairs, one prompt each), dev (n_dev pairs, one prompt each: RL
validation, the reward model's held-out pairs, and any tuning of the recipe) and train (the rest, both
orders; every training split draws from it). The one-digit sums the corpus writes are train pairs
only, so neither held-out split contains a sum the pretraining text spells out.

Launch: jobs submit tiny --stage data [data.n_sft=5000]
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from stages.schema import Float, Int, Map, Str, check
from stages.contract import StageError

ALPHABET = "0123456789+= \n"
SPECIALS = ["<pad>", "<bos>", "<eos>"]


ROWS = 100_000_000     # per split: far beyond what the task can use, far below what breaks the machine
SCHEMA = Map({
    "seed": Int(0, 2**63 - 1),
    "max_operand": Int(10, 20_000),     # >= 10: the task is sums of two-digit numbers
    "n_eval": Int(1, ROWS),
    "n_corpus_lines": Int(1, ROWS),
    "n_sft": Int(1, ROWS),
    "n_prefs": Int(1, ROWS),
    "n_rl": Int(1, ROWS),
    "n_dev": Int(1, ROWS),
    "n_rl_val": Int(1, ROWS),
    "sft_carry_slips": Float(0, 1, required=False),   # absent: 0, every SFT answer right
    "note": Str(required=False),        # free text kept in the run record (`+data.note='why'`), unused
})
# Memory, an upper estimate (measured peak RSS: n_sft=1e6 479 MB, est. 544, before the split by unordered
# pair): the operand pairs (unordered, then the train pairs in both orders: 129 bytes an ordered pair
# measured at max_operand=999), every split as dicts and as joined text, the interpreter.
BYTES_PER_PAIR, BYTES_PER_ROW, BASE_BYTES = 160, 400, 150 * 2**20


def estimate_bytes(cfg: dict) -> int:
    rows = cfg["n_eval"] + cfg["n_corpus_lines"] + cfg["n_sft"] + cfg["n_prefs"] + cfg["n_rl"] + 2 * cfg["n_dev"]
    return BASE_BYTES + (cfg["max_operand"] + 1) ** 2 * BYTES_PER_PAIR + rows * BYTES_PER_ROW


def check_config(config: dict, resources: dict | None = None) -> list[str]:
    """Every problem with the `data:` section; with the stage's resources, whether it fits in mem_gb."""
    if not isinstance(config.get("data"), dict):
        return ["the config has no data: section"]
    problems = check(config["data"], SCHEMA, "data")
    if problems:
        return problems
    cfg = config["data"]
    room = len(_unordered_pairs(cfg["max_operand"])[1])
    if cfg["n_eval"] + cfg["n_dev"] >= room:
        problems.append(f"data.n_eval {cfg['n_eval']} + data.n_dev {cfg['n_dev']} must leave training pairs: "
                        f"{room} unordered pairs can be held out (max_operand {cfg['max_operand']}, one-digit sums excluded)")
    if cfg["n_rl_val"] > cfg["n_dev"]:
        problems.append(f"data.n_rl_val {cfg['n_rl_val']} > data.n_dev {cfg['n_dev']} (validation comes from the dev pairs)")
    mem_gb = (resources or {}).get("mem_gb")
    if mem_gb and estimate_bytes(cfg) > mem_gb * 2**30:
        problems.append(f"data needs about {estimate_bytes(cfg) / 2**30:.1f} GB of memory, more than the "
                        f"stage's mem_gb {mem_gb}: lower the counts or raise resources.mem_gb")
    return problems


def gate(ctx, produced: dict[str, Path]) -> list:
    """Each split has the rows the config asked for (stages/gate.py), and the tokenizer loads."""
    from stages import gate as g

    cfg = ctx.config["data"]
    files = [("corpus", "train.txt", "n_corpus_lines"), ("sft", "train.jsonl", "n_sft"), ("prefs", "train.jsonl", "n_prefs"),
             ("prefs", "validation.jsonl", "n_dev"), ("rl", "train.jsonl", "n_rl"), ("rl", "validation.jsonl", "n_rl_val"),
             ("eval", "test.jsonl", "n_eval")]
    checks = [g.rows(produced[out] / name, cfg[key], f"data.{key}") for out, name, key in files]
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(produced["tokenizer"] / "tokenizer.json")).get_vocab_size()
    return checks + [g.Check("loads", vocab > 0, f"tokenizer loads: {vocab} tokens")]


def run(ctx) -> dict[str, Path]:
    cfg = ctx.section("data")
    problems = check_config(ctx.config)
    if problems:
        raise StageError("data: " + "; ".join(problems))
    rng = random.Random(cfg["seed"])
    slips = random.Random(f"{cfg['seed']}/sft-slips")  # its own stream: the other splits do not depend on it
    top = cfg["max_operand"]

    seen, rest = _unordered_pairs(top)
    rng.shuffle(rest)
    n_test, n_dev = cfg["n_eval"], cfg["n_dev"]
    test = [_oriented(rng, p) for p in rest[:n_test]]
    dev = [_oriented(rng, p) for p in rest[n_test:n_test + n_dev]]
    train = [q for x, y in rest[n_test + n_dev:] + seen for q in ((x, y), (y, x))[:1 if x == y else 2]]

    out = {
        "corpus": _write_lines(ctx.output_dir("corpus") / "train.txt", _corpus(rng, top, cfg["n_corpus_lines"])),
        "sft": _write_jsonl(ctx.output_dir("sft") / "train.jsonl",
                            [_demonstration(slips, cfg.get("sft_carry_slips", 0.0), *rng.choice(train)) for _ in range(cfg["n_sft"])]),
        "prefs": _write_jsonl(ctx.output_dir("prefs") / "train.jsonl", [_preference(i, *rng.choice(train)) for i in range(cfg["n_prefs"])]),
        "rl": _write_jsonl(ctx.output_dir("rl") / "train.jsonl", [_example(*rng.choice(train)) for _ in range(cfg["n_rl"])]),
        "eval": _write_jsonl(ctx.output_dir("eval") / "test.jsonl", [_example(a, b) for a, b in test]),
    }
    _write_jsonl(out["prefs"] / "validation.jsonl", [_preference(i, a, b) for i, (a, b) in enumerate(dev)])
    _write_jsonl(out["rl"] / "validation.jsonl", [_example(a, b) for a, b in dev[:cfg["n_rl_val"]]])
    out["tokenizer"] = _train_tokenizer(ctx.output_dir("tokenizer"), out["corpus"] / "train.txt")
    ctx.log({"n_train_pairs": len(train), "n_dev": len(dev), "n_eval": len(test)}, step=0)
    return out


def _unordered_pairs(top: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every unordered operand pair (a <= b) in [0, top]: (the one-digit sums the corpus writes, the rest)."""
    pairs = [(a, b) for b in range(top + 1) for a in range(b + 1)]
    return [p for p in pairs if p[1] <= 9], [p for p in pairs if p[1] > 9]


def _oriented(rng: random.Random, pair: tuple[int, int]) -> tuple[int, int]:
    """A held-out pair's one prompt: its operands in an order drawn from the seed."""
    return pair if rng.random() < 0.5 else pair[::-1]


def _example(a: int, b: int) -> dict:
    return {"prompt": f"{a}+{b}=", "answer": str(a + b)}


def _carries(a: int, b: int) -> bool:
    """The ones digits sum to 10 or more: the tens digit of a + b takes a carry."""
    return (a % 10) + (b % 10) >= 10


def _demonstration(slips: random.Random, rate: float, a: int, b: int) -> dict:
    """An SFT example written by a careless annotator: where the ones digits carry, the carry is
    dropped with probability `rate` ("27+45=" -> "62"). Above 0.5 the SFT model's most likely answer
    to a carrying sum is wrong while the right one is still sampled: reward RL can reach."""
    example = _example(a, b)
    if _carries(a, b) and slips.random() < rate:
        example["answer"] = str(a + b - 10)
    return example


def _preference(i: int, a: int, b: int) -> dict:
    """Pair number i: odd ones are "style", even ones "sum".

    A "sum" pair: the right sum vs a wrong answer. Half reject a tens digit one off, as often one up
    as one down, on carrying sums and on the others alike; on a carrying sum "one down" is the carry
    dropped, the slip the SFT data teach, which SFT's likelihood ranks the wrong way. A reward model
    shown one direction only learns it as a rule, and GRPO on it follows the rule: with only "down"
    rejected, it added carries everywhere; with only the slip rejected on
    carrying sums, it added their carry twice (seed 1234, AMD EPYC host: held-out greedy 0.756 ->
    0.798, 26 of 94 carrying validation sums ten too high). A quarter reject the right answer cut
    short ("10", or one time in two for a three-digit sum "1", for 108) and a quarter the answer run
    on by a digit ("1088"): without them GRPO on the reward model answered every prompt with one
    digit (seed 42, held-out 0.72 -> 0.0); with "10" but never "1", it answered "1" to three-digit
    sums (22 of 200 validation prompts by step 120, seed 1234).
    A "style" pair: the right sum in the house style, a space after "=" (" 68"), vs the bare "68"
    SFT was trained on: only the preferences say it, and SFT's likelihood ranks it the wrong way, so
    a reward model must learn it. (RL's reward-model reward strips responses: it ranks rollouts by
    the "sum" preference.)"""
    right = a + b
    if i % 2 == 1:
        return {"prompt": f"{a}+{b}=", "chosen": f" {right}", "rejected": str(right), "kind": "style"}
    if i % 8 == 0 and right >= 10:
        wrong = right // 100 if right >= 100 and i % 16 == 8 else right // 10   # cut short: "1" or "10" for 108
    elif i % 8 == 4:
        wrong = right * 10 + right % 10    # run on: "1088" for 108
    elif _carries(a, b):
        wrong = right + 10 if i % 8 == 6 else right - 10   # the carry added twice, or dropped (the slip)
    else:
        wrong = right - 10 if i % 8 == 6 and right >= 10 else right + 10   # a tens digit one off
    return {"prompt": f"{a}+{b}=", "chosen": str(right), "rejected": str(wrong), "kind": "sum"}


def _corpus(rng: random.Random, top: int, n_lines: int) -> list[str]:
    lines = []
    for _ in range(n_lines):
        if rng.random() < 0.5:
            start = rng.randint(0, 2 * top)
            lines.append(" ".join(str(start + i) for i in range(rng.randint(3, 8))))
        else:
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            lines.append(f"{a}+{b}={a + b}")
    return lines


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path.parent


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return path.parent


def _train_tokenizer(out: Path, corpus: Path) -> Path:
    """One token per character: sums are learned digit by digit, which merges would hide.

    Written with the tokenizers library alone, as the two files transformers' fast tokenizer saves
    for it (its post-processor and its tokenizer_config.json, byte for byte: tests/stages/test_data.py),
    so that this stage's process does not import transformers, the larger part of its start-up."""
    from tokenizers import Tokenizer, decoders, models, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=len(SPECIALS) + len(ALPHABET), special_tokens=SPECIALS,
                                  initial_alphabet=list(ALPHABET), show_progress=False)
    tok.train([str(corpus)], trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"backend": "tokenizers", "tokenizer_class": "TokenizersBackend", "model_max_length": int(1e30),
              "pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>"}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out
