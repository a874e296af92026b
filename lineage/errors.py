"""What the store raises. Messages name the thing, the path and what to run next."""


class LineageError(Exception):
    """Base of every store error; the CLI prints it as one line and exits 2."""


class NotFound(LineageError):
    pass


class Ambiguous(LineageError):
    pass


class StoreUnusable(LineageError):
    """The store path does not exist, is not a store, or cannot be written."""


class Corrupt(LineageError):
    """An artifact's files no longer match its manifest."""
