"""The `_hf_placeholder` rows of NVIDIA's RL blend, resolved from the hub datasets they point into.

NVIDIA's Nano-3 RL blend does not ship the DAPO-Math-17k and Skywork-OR1 questions: their rows carry
`_hf_placeholder: {row, question_template}` and the source's name in `dataset`. Nemotron's RL data prep
(src/nemotron/data_prep/utils/hf_placeholder.py) fills them in from those datasets; this module does the
same, reading the datasets through the `datasets` library (stages/prep/sources.py, so a hub mirror works
too). Each blend `dataset` name has a target in the recipe (prep_rl.placeholders): where the dataset is
(path, split), where its question and answer sit in a row (dotted, a number indexes a list:
`prompt.0.content`), and how the blend's template puts the question back together:
    dapo     the hub's question is wrapped in DAPO's own instructions (its first and last paragraphs);
             those are taken off, and the template's `prefix` and `suffix` put around what is left,
             trailing newlines dropped
    skywork  the template is a string; its `{question}` is replaced by the hub's question
The answer is the target's field, JSON-decoded when it is JSON (Skywork keeps '["42"]'): a list gives
its first item, a mapping its first value. The resolved row is the blend's row with the question in
`question` and `responses_create_params.input` and the answer in `expected_answer`, the placeholder gone:
it is then read like every other row (its agent routes it to an environment).
"""
from __future__ import annotations

import json

from stages.schema import Map, Str

TARGET = Map({
    "path": Str(empty=False), "split": Str(required=False, null=True), "subset": Str(required=False, null=True),
    "revision": Str(required=False, null=True), "question_field": Str(empty=False),
    "answer_field": Str(empty=False), "template": Str(choices=("dapo", "skywork")),
})


def field(row, dotted: str):
    """The value at a dotted path; a numeric part indexes a list. None where the path leads nowhere."""
    for part in dotted.split("."):
        if isinstance(row, dict):
            row = row.get(part)
        elif isinstance(row, (list, tuple)) and part.isdigit() and int(part) < len(row):
            row = row[int(part)]
        else:
            return None
        if row is None:
            return None
    return row


def dapo_question(hub_question: str, template) -> str:
    """DAPO's question without its instruction paragraphs, inside the blend's own prefix and suffix."""
    if not isinstance(template, dict):
        return hub_question
    body = hub_question
    _, sep, rest = hub_question.partition("\n\n")
    inner, sep2, _ = rest.rpartition("\n\n")
    if sep and sep2:                       # at least three paragraphs: the first and the last are DAPO's
        body = inner
    return f"{template.get('prefix', '')}{body}{template.get('suffix', '')}".rstrip("\n")


def skywork_question(hub_question: str, template) -> str:
    if isinstance(template, str) and "{question}" in template:
        return template.replace("{question}", hub_question)
    return hub_question


def answer(raw):
    """The target's answer as the verifier gets it: JSON text decoded, a list's first item."""
    if not isinstance(raw, str):
        return raw
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, list):
        return value[0] if value else raw
    if isinstance(value, dict):
        return next(iter(value.values()), raw)
    return value


class Resolver:
    """Resolves rows against the targets, loading each target dataset once, when a row first needs it.
    `counts` tells how many rows were resolved and why the others were not."""

    def __init__(self, targets: dict, mirror: str | None = None):
        self.targets, self.mirror = targets, mirror
        self.tables: dict = {}
        self.counts = {"resolved": 0, "unknown_dataset": 0, "bad_row": 0, "no_question": 0}

    def _table(self, name: str):
        if name not in self.tables:
            from stages.prep import sources as src

            t = self.targets[name]
            self.tables[name] = src.load({"path": t["path"], "split": t.get("split"), "subset": t.get("subset"),
                                          "revision": t.get("revision"), "mirror": self.mirror})
        return self.tables[name]

    def resolve(self, row: dict) -> dict | None:
        """The row with its question and answer filled in, or None (counted by reason)."""
        ph, name = row.get("_hf_placeholder") or {}, row.get("dataset")
        if name not in self.targets:
            self.counts["unknown_dataset"] += 1
            return None
        table, index = self._table(name), ph.get("row")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(table):
            self.counts["bad_row"] += 1
            return None
        target, hub_row = self.targets[name], table[index]
        question = field(hub_row, target["question_field"])
        if question is None:
            self.counts["no_question"] += 1
            return None
        question, template = str(question), ph.get("question_template")
        full = dapo_question(question, template) if target["template"] == "dapo" else skywork_question(question, template)
        out = {k: v for k, v in row.items() if k != "_hf_placeholder"}
        # As Nemotron writes them: Skywork's `question` is the hub's own text, DAPO's the templated one;
        # the request (which prep_rl reads first) carries the templated question for both.
        out["question"] = question if target["template"] == "skywork" else full
        out["expected_answer"] = answer(field(hub_row, target["answer_field"]))
        out["responses_create_params"] = {"input": [{"role": "user", "content": full}]}
        self.counts["resolved"] += 1
        return out
