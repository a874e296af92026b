"""Records never hold a secret in clear.

A variable whose name has a word like TOKEN, KEY, SECRET, PASSWORD (`HF_TOKEN`, `PIN_PASSWORD`, not
`TOKENIZERS_PARALLELISM`) is a secret. Its value is redacted from the recorded config wherever it
lands (`redact`, at submit): a whole string becomes "<redacted: from $NAME>", an occurrence inside a
longer string is replaced in place whatever its length, and a number equal to the value decoded
(`${oc.decode:${oc.env:PIN}}` gives 4821, not "4821") becomes "<redacted: decoded from $NAME>". The
job puts the values back from its own environment (`unredact`), so records, the index and exports
never hold them.

A user's own text shaped like a placeholder is not a reference: `redact` escapes it by doubling the
`$` ("<redacted: from $$X>"), and `unredact` turns that back into the literal text, never reading X.
"""
from __future__ import annotations

import math
import os
import re

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD")
#: Values that are switches, not secrets (`HF_HUB_DISABLE_IMPLICIT_TOKEN=1`): redacting every "1"
#: and "true" would garble records and protect nothing.
FLAGS = {"", "0", "1", "true", "false", "yes", "no", "on", "off", "none", "null"}
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: In a recorded string: a placeholder (group "name"), or an escaped literal "<redacted: … $$".
_RECORDED = re.compile(r"<redacted: (?P<decoded>decoded )?from \$(?:(?P<dollar>\$)|(?P<name>" + _NAME + r")>)")
#: In a user's string: the start of anything a reader could take for a placeholder.
_LITERAL = re.compile(r"<redacted: (?:decoded )?from \$")


def is_secret_name(name: str) -> bool:
    """A word of the name (split at '_') is, or ends with, a secret word: MY_API_TOKEN, DBPASSWORD."""
    return any(word.endswith(w) for word in name.upper().split("_") for w in SECRET_WORDS)


def secret_env(environ=None) -> list[tuple[str, str]]:
    """(name, value) of secret-named variables with a value that is not a flag, longest value first."""
    env = os.environ if environ is None else environ
    found = [(k, v) for k, v in env.items() if is_secret_name(k) and v.strip().lower() not in FLAGS]
    return sorted(found, key=lambda kv: (-len(kv[1]), kv[0]))


def decode(text: str):
    """What OmegaConf's `oc.decode` makes of a variable's text (a number, a bool, a string...)."""
    from omegaconf import OmegaConf

    node = OmegaConf.create({"v": "${oc.decode:${oc.env:_JOBS_DECODE_VALUE}}"})
    old = os.environ.get("_JOBS_DECODE_VALUE")
    os.environ["_JOBS_DECODE_VALUE"] = text
    try:
        return OmegaConf.to_container(node, resolve=True)["v"]
    except Exception:  # not decodable: it can only ever land as text
        return text
    finally:
        if old is None:
            os.environ.pop("_JOBS_DECODE_VALUE", None)
        else:
            os.environ["_JOBS_DECODE_VALUE"] = old


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def redact(config, environ=None):
    """A copy of `config` with every secret's value replaced by a placeholder, and every literal
    placeholder-shaped text escaped."""
    secrets = secret_env(environ)
    by_value: dict[str, str] = {}
    for name, value in secrets:
        by_value.setdefault(value, name)
    numbers: dict[float, str] = {}
    for name, value in secrets:
        try:
            n = float(value.strip().replace("_", ""))
        except ValueError:
            n = decode(value)
        if _number(n) and math.isfinite(n):
            numbers.setdefault(float(n), name)
    pattern = re.compile("|".join(re.escape(v) for v in by_value)) if by_value else None

    def text(value: str) -> str:
        parts, at = [], 0
        for m in pattern.finditer(value) if pattern else ():
            parts.append(_escape(value[at:m.start()]))
            parts.append(f"<redacted: from ${by_value[m.group()]}>")
            at = m.end()
        parts.append(_escape(value[at:]))
        return "".join(parts)

    def fix(value):
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, str):
            return text(value)
        if _number(value) and math.isfinite(value) and float(value) in numbers:
            return f"<redacted: decoded from ${numbers[float(value)]}>"
        return value

    return fix(config)


def _escape(literal: str) -> str:
    return _LITERAL.sub(lambda m: m.group() + "$", literal)


class MissingSecret(Exception):
    """A redacted config value whose variable is not set in the job's environment."""


def unredact(config, environ=None):
    """The config the stage sees: placeholders replaced by the variables' values in this environment
    (decoded where the recorded value was a number), escaped literals restored."""
    env = os.environ if environ is None else environ

    def value_of(name: str) -> str:
        if name not in env:
            raise MissingSecret(f"the config needs ${name}, recorded redacted, and this job's environment does not set it")
        return env[name]

    def put(m: re.Match) -> str:
        if m["dollar"]:
            return m.group()[:-1]
        return value_of(m["name"])

    def fix(value):
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, str) and "<redacted: " in value:
            whole = _RECORDED.fullmatch(value)
            if whole and whole["decoded"] and whole["name"]:
                return decode(value_of(whole["name"]))
            return _RECORDED.sub(put, value)
        return value

    return fix(config)
