"""stages/schema.py: every bad value becomes one line; good values pass."""
import math

from stages.schema import Any, Bool, Float, Int, List, Map, Str, check

SCHEMA = Map({
    "n": Int(1, 10_000_000),
    "lr": Float(0, 1, open_lo=True),
    "backend": Str(choices=("hf", "vllm")),
    "name": Str(pattern=r"[a-z]+", empty=False),
    "flag": Bool(),
    "note": Str(required=False, null=True),
    "stop": List(Str(), max_len=2),
    "opts": Map({}, extra=True),
    "free": Any(),
    "even": Int(check=lambda v: None if v % 2 == 0 else "must be even", required=False),
})
GOOD = {"n": 5, "lr": 1, "backend": "hf", "name": "abc", "flag": True, "stop": ["x"], "opts": {"a": 1}, "free": [1]}


def test_good_config_has_no_problems():
    assert check(GOOD, SCHEMA, "s") == []
    assert check({**GOOD, "note": None, "even": 4}, SCHEMA, "s") == []


def test_each_bad_value_is_one_line():
    cases = {
        "n": ["abc", -5, 1e30, 10**12, "10**12", True, 3.0, None],
        "lr": [0, 0.0, float("nan"), math.inf, "1e-3", False, 2],
        "backend": ["tpu", 1, ""],
        "name": ["A", "", "a\nb", 5],
        "flag": [1, "true"],
        "stop": ["x", ["a", "b", "c"], [1]],
        "opts": [[1], "x"],
        "even": [3, True],
    }
    for key, values in cases.items():
        for v in values:
            problems = check({**GOOD, key: v}, SCHEMA, "s")
            assert len(problems) == 1 and f"s.{key}" in problems[0] and "\n" not in problems[0], (key, v, problems)


def test_missing_and_unknown_keys_are_reported_together():
    bad = {k: v for k, v in GOOD.items() if k != "n"} | {"typo": 1, "n_sftt": 2}
    problems = check(bad, SCHEMA, "data")
    assert problems == ["data.n is missing", "data has unknown keys n_sftt, typo (known: "
                        "n, lr, backend, name, flag, note, stop, opts, free, even)"]
    assert check("x", {"a": Int()}, "top") == ["top must be a mapping (got 'x')"]
    assert check({"a": "y" * 500}, {"a": Int()})[0].endswith("...)")
