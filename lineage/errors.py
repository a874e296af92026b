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


class Damaged(LineageError):
    """A record, ref or index file of the store cannot be read: truncated, garbage, or the wrong shape."""


class Unsafe(LineageError):
    """A path or name that would make the store read or change something outside what it was given:
    a symbolic link, a FIFO, socket or device inside an artifact, or a name that leaves its folder."""


def show_path(path) -> str:
    """A path for a one-line message: control characters (a newline in a file name) are escaped."""
    text = str(path)
    if text.isprintable():
        return text
    return repr(text)[1:-1]
