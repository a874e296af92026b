"""What the launcher raises for bad input. The CLI prints one line and exits 2; nothing is recorded."""


class JobsError(Exception):
    """Base of every user-facing launcher error."""


class RecipeError(JobsError):
    """An unknown recipe or stage, a malformed override, a config that does not compose."""


class InputError(JobsError):
    """An input that is missing, unknown, or of the wrong kind."""


class ExecutorError(JobsError):
    """The executor refused the job (bad partition, time, profile...)."""


def one_line(text: str) -> str:
    """The CLI's promise is one line on stderr: a control character from a path or value is escaped."""
    return text if text.isprintable() else repr(text)[1:-1]
