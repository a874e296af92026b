"""Records never hold a secret in clear.

Config values that came from a secret in the environment (a variable named like *TOKEN*, *KEY*,
*SECRET*, *PASSWORD*) are recorded as "<redacted: from $NAME>" (`redact`, at submit); the job puts
the value back from its own environment (`unredact`), so records, the index and exports never hold it.
"""
from __future__ import annotations

import os
import re

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD")
_PLACEHOLDER = re.compile(r"<redacted: from \$([A-Za-z_][A-Za-z0-9_]*)>")
#: Values this short are redacted only where they are a whole config value (as substrings they would
#: match by chance: "1" inside "0.1"); below _MIN_WHOLE they are flags ("1", "no"), not secrets.
_MIN_SUBSTRING = 8
_MIN_WHOLE = 4


def secret_env(environ=None) -> list[tuple[str, str]]:
    """(name, value) of secret-named variables with a value, longest value first."""
    env = os.environ if environ is None else environ
    found = [(k, v) for k, v in env.items() if len(v) >= _MIN_WHOLE and any(w in k.upper() for w in SECRET_WORDS)]
    return sorted(found, key=lambda kv: (-len(kv[1]), kv[0]))


def redact(config, environ=None):
    """A copy of `config` with every secret's value replaced by "<redacted: from $NAME>"."""
    secrets = secret_env(environ)
    if not secrets:
        return config

    def fix(value):
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if not isinstance(value, str):
            return value
        for name, secret in secrets:
            if value == secret:
                return f"<redacted: from ${name}>"
            if len(secret) >= _MIN_SUBSTRING and secret in value:
                value = value.replace(secret, f"<redacted: from ${name}>")
        return value

    return fix(config)


class MissingSecret(Exception):
    """A redacted config value whose variable is not set in the job's environment."""


def unredact(config, environ=None):
    """The config the stage sees: placeholders replaced by the variables' values in this environment."""
    env = os.environ if environ is None else environ

    def put(match: re.Match) -> str:
        name = match.group(1)
        if name not in env:
            raise MissingSecret(f"the config needs ${name}, recorded redacted, and this job's environment does not set it")
        return env[name]

    def fix(value):
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, str) and "<redacted: from $" in value:
            return _PLACEHOLDER.sub(put, value)
        return value

    return fix(config)
