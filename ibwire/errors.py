"""Errors meant for the user: the CLI prints their message as one sentence, never a traceback."""


class UserError(Exception):
    """Wrong arguments, unreadable input, missing privileges or hardware; exit status 2."""

    exit_code = 2


class InputError(UserError):
    """A mistake in an input file, pointed at as `path:line:` (line 0: the file as a whole)."""

    def __init__(self, path, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
